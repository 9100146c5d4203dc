"""The docs, built as `make docs` builds them without Quarto, then opened in a real browser (Debian's headless Chromium).

The preview is built once per session into a temporary folder (`python -m kvstrat.preview --preview --no-write`), so
the test writes nothing in the repository. The static checks run everywhere; the browser checks need
/usr/bin/chromium (`.ci/run` installs it) and skip with a message without it."""
import base64, json, re, shutil, subprocess, sys
from pathlib import Path
import pytest
from bs4 import BeautifulSoup
from kvstrat.docs import ABLATIONS, RUN_IMAGES, bench_runs, nbs_path, page_title, read_rows, sidebar
from kvstrat.preview import html_name

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path('/usr/bin/chromium')
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run']
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


@pytest.fixture(scope='module')
def site(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp('docs')/'site'
    r = subprocess.run([sys.executable, '-m', 'kvstrat.preview', '--preview', '--no-write', '--dest', str(dest)], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f'make docs failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    assert 'building the HTML preview' in r.stdout, r.stdout # it says which path it took
    return dest


def soup(f: Path) -> BeautifulSoup: return BeautifulSoup(f.read_text(encoding='utf-8'), 'html.parser')
def expected_pages() -> list[str]: return [html_name(p) for _, ps in sidebar() for p in ps]
def local(url: str) -> str | None:
    "The file part of a relative URL; None for fragments and absolute URLs (http:, data:, ...)."
    if not url or url.startswith('#') or re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', url): return None
    return url.split('#')[0].split('?')[0] or None


def test_every_page_built(site):
    pages = expected_pages()
    assert pages[0] == 'index.html' and {'cache.html', 'stratigraphic_design.html', 'diary.html'} <= set(pages)
    missing = [p for p in pages if not (site/p).is_file()]
    assert not missing, f'pages not built: {missing}'


def test_internal_links_resolve(site):
    broken = []
    for page in site.glob('*.html'):
        s = soup(page)
        for tag, attr in (('a', 'href'), ('img', 'src'), ('link', 'href'), ('script', 'src')):
            for el in s.find_all(tag):
                url = el.get(attr)
                if url and url.startswith('https://kvstrat.github.io/'): broken.append((page.name, url, 'hosted-docs link not made relative'))
                if (path := local(url)) and not (page.parent/path).is_file(): broken.append((page.name, url, 'missing'))
    assert not broken, broken


def test_images_are_embedded_or_copied(site):
    n = 0
    for page in site.glob('*.html'):
        for img in soup(page).find_all('img'):
            src, n = img.get('src', ''), n + 1
            if src.startswith('data:image/png;base64,'): assert base64.b64decode(src.split(',', 1)[1])[:8] == PNG_MAGIC, page.name
            elif src.startswith('data:image/'): pass
            else: assert (page.parent/local(src)).stat().st_size > 0, (page.name, src)
    assert n >= 4 # the committed figures of the architecture study at least


def test_index_shows_the_committed_results(site):
    s = soup(site/'index.html')
    assert s.title.string.strip() == 'kvstrat' and s.select_one('h1.title').get_text(strip=True) == 'kvstrat'
    runs = bench_runs()
    if not runs:
        assert 'No benchmark results are committed yet' in s.get_text()
        return
    run, text = runs[0], s.get_text(' ')
    assert f'nbs/results/bench/{run.name}' in text # it names the run it shows
    rows = read_rows(run)
    assert all(r['model'] in text and r['text'] in text for r in rows) # and the model and text the figures name
    tables = [t for t in s.find_all('table') if 'ΔPPL' in t.get_text()]
    assert len(tables) == 1, f'{len(tables)} tables of results: the index shows one, the headline, and links the rest'
    shown = {tr.find('td').get_text(strip=True) for t in tables for tr in t.find_all('tr') if tr.find('td')}
    assert len(shown) >= len({r['strategy'] for r in rows}), (shown, {r['strategy'] for r in rows})
    for png in RUN_IMAGES:
        if (run/png).is_file():
            assert any(i.get('alt') == png.removesuffix('.png') for i in s.find_all('img')), f'{png} not shown'


def test_readme_opens_like_a_library():
    "README.md as `make docs` writes it: short; install, quickstart and the headline first; its local links resolve."
    text = (ROOT/'README.md').read_text(encoding='utf-8')
    lines = text.splitlines()
    assert len(lines) <= 250, f'README.md has {len(lines)} lines: move the detail to a docs page and link it'
    heads = [l for l in lines if l.startswith('## ')]
    assert heads[:3] == ['## Install', '## Quickstart', '## Headline results'], heads
    install = '\n'.join(lines[lines.index('## Install'):lines.index('## Quickstart')])
    assert 'pip install "kvstrat' in install and '`make test`' in install
    quick = lines[lines.index('## Quickstart'):lines.index('## Headline results')]
    start = quick.index('```python')
    assert quick.index('```', start + 1) - start - 1 <= 10, 'the quickstart is at most 10 lines'
    links = re.findall(r'\]\(([^)\s]+)\)', text)
    broken = [u for u in links if (path := local(u)) and not (ROOT/path).exists()]
    assert not broken, broken


def test_design_page_loads_or_marks_each_ablation(site):
    text = soup(site/'stratigraphic_design.html').get_text(' ')
    root = nbs_path()/'results'/'stratigraphic'
    for key in ABLATIONS:
        measured = root.is_dir() and any(p.name.replace('-', '_').startswith(key) for p in root.iterdir())
        assert measured or f'{key}*.json' in text, f'{key}: neither evidence nor a placeholder'
    assert 'Placeholder: not measured yet' in text or root.is_dir()


def test_diary_is_a_page(site):
    first = next(l for l in (ROOT/'DIARY.md').read_text(encoding='utf-8').splitlines() if l.startswith('# '))[2:]
    assert first in soup(site/'diary.html').get_text()


# In the browser

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=f'{CHROMIUM} not found: install Debian\'s chromium '
                                    '(`apt-get install -y chromium`, as .ci/run does) to check the docs in a real browser')


def chromium(tmp_path, *args) -> str:
    r = subprocess.run([str(CHROMIUM), *FLAGS, f'--user-data-dir={tmp_path/"profile"}', *args],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@needs_chromium
@pytest.mark.parametrize('page', ['index.html', 'cache.html', 'arch_study.html'])
def test_page_in_chromium(site, tmp_path, page):
    dom = BeautifulSoup(chromium(tmp_path, '--virtual-time-budget=15000', '--dump-dom', (site/page).as_uri()), 'html.parser')
    title = next(page_title(p)[0] for _, ps in sidebar() for p in ps if html_name(p) == page)
    assert dom.title.string.strip() == (title if page == 'index.html' else f'{title} – kvstrat')
    assert dom.select_one('h1.title').get_text(strip=True) == title
    nav = [a['href'] for a in dom.select('nav.sidebar li a')]
    assert nav == expected_pages(), nav # the navigation links every page, in notebook order
    assert dom.select_one(f'nav.sidebar a.active')['href'] == page
    imgs = dom.find_all('img')
    assert all(i.get('data-loaded') == 'yes' for i in imgs), [(i.get('alt'), i.get('data-loaded')) for i in imgs] # decoded by the browser
    if page == 'index.html':
        assert dom.find('table') and 'strategy' in dom.find('table').get_text()
        if bench_runs(): assert any('ΔPPL' in t.get_text() for t in dom.find_all('table'))
    if page == 'arch_study.html': assert len(imgs) >= 4


@needs_chromium
def test_index_screenshot(site, tmp_path):
    shot = site.parent/'index.png'
    chromium(tmp_path, '--hide-scrollbars', '--window-size=1280,2400', '--virtual-time-budget=15000', f'--screenshot={shot}',
             (site/'index.html').as_uri())
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
    width, height = int.from_bytes(data[16:20], 'big'), int.from_bytes(data[20:24], 'big')
    assert (width, height) == (1280, 2400)
    from PIL import Image
    im = Image.open(shot).convert('RGB')
    assert len(im.getcolors(1 << 20) or range(1 << 20)) > 50, 'the screenshot is (nearly) blank'
    print(f'screenshot: {shot}')
