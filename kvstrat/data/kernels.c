/* kvstrat's CPU kernels: attention scores and weighted sums read straight from packed codes (AVX2 + FMA).
   Rows are head-major: row t of head b is row b*n + t. Every function accumulates in float32. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "kvstrat's CPU kernels need AVX2 and FMA"
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

/* 8 codes (channels 8*dv ... 8*dv+7) of one packed row, as floats. Codes sit in one little-endian bit stream, as
   `pack_bits` writes them. */
static inline __m256 codes8(const uint8_t *row, int bits, int dv) {
    __m128i x;
    if (bits == 8) return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 8 * dv))));
    if (bits == 4) {
        uint32_t w; memcpy(&w, row + 4 * dv, 4);
        x = _mm_cvtsi32_si128((int)w);
        x = _mm_unpacklo_epi8(x, x); /* each byte twice: one lane for its low nibble, one for its high */
        __m256i v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(x), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
        return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    }
    if (bits == 3) { /* eight codes fill three bytes: one 24-bit word, code i at bit 3i */
        uint32_t w; /* one 4-byte load that stays inside the row: the byte before the word, or after the first one */
        if (dv) { memcpy(&w, row + 3 * dv - 1, 4); w >>= 8; } else memcpy(&w, row, 4);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21));
        return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(7)));
    }
    uint16_t w; memcpy(&w, row + 2 * dv, 2);
    x = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    __m256i v = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(x), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(3)));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* res[i] = w[i*D + 8*v0 ...] . code[8*v0 ...] over channel vectors v0..v1-1, for MB (1-3, a constant once inlined)
   rows of w; two accumulators per row keep the FMA chains short. */
static inline __attribute__((always_inline)) void dots(const float *w, int D, int MB, const uint8_t *row, int bits,
                                                      int v0, int v1, float *res) {
    __m256 a[3], b[3];
    for (int i = 0; i < MB; i++) a[i] = b[i] = _mm256_setzero_ps();
    int dv = v0;
    for (; dv + 1 < v1; dv += 2) {
        __m256 c0 = codes8(row, bits, dv), c1 = codes8(row, bits, dv + 1);
        for (int i = 0; i < MB; i++) {
            a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i * D + 8 * dv), c0, a[i]);
            b[i] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i * D + 8 * dv + 8), c1, b[i]);
        }
    }
    if (dv < v1) {
        __m256 c0 = codes8(row, bits, dv);
        for (int i = 0; i < MB; i++) a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i * D + 8 * dv), c0, a[i]);
    }
    for (int i = 0; i < MB; i++) res[i] = hsum(_mm256_add_ps(a[i], b[i]));
}

/* The dot products of MB (1-3) rows of w with 4 consecutive code rows (stride P) over channel vectors v0..v1-1: res[i]
   holds row i's 4 results. One accumulator per (query, row) and a final horizontal-add tree, instead of one horizontal
   sum per product. */
static inline __attribute__((always_inline)) void dots4(const float *w, int D, int MB, const uint8_t *rows, int P,
                                                       int bits, int v0, int v1, __m128 *res) {
    __m256 a[3][4];
    for (int i = 0; i < MB; i++) for (int r = 0; r < 4; r++) a[i][r] = _mm256_setzero_ps();
    for (int dv = v0; dv < v1; dv++)
        for (int r = 0; r < 4; r++) {
            __m256 c = codes8(rows + (size_t)r * P, bits, dv);
            for (int i = 0; i < MB; i++) a[i][r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i * D + 8 * dv), c, a[i][r]);
        }
    for (int i = 0; i < MB; i++) {
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[i][0], a[i][1]), _mm256_hadd_ps(a[i][2], a[i][3]));
        res[i] = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    }
}

/* Scores of MB (1-3, a constant once inlined) queries against n rows of per-token groups (see `token_scores`). */
static inline __attribute__((always_inline)) void token_scores_block(const float *qb, const float *qsum, int MB,
        const uint8_t *codes, const float *scale, const float *offset, float center, float *out,
        int M, int n, int D, int bits, int J) {
    int P = D * bits / 8, gv = D / J / 8, t = 0;
    float res[3];
    if (J == 1) /* one group per token: four tokens at a time, scales and offsets applied as vectors */
        for (; t + 4 <= n; t += 4) {
            __m128 r4[3], s4 = _mm_loadu_ps(scale + t);
            __m128 z4 = offset ? _mm_loadu_ps(offset + t) : _mm_mul_ps(s4, _mm_set1_ps(-center));
            dots4(qb, D, MB, codes + (size_t)t * P, P, bits, 0, gv, r4);
            for (int i = 0; i < MB; i++)
                _mm_storeu_ps(out + (size_t)i * n + t, _mm_add_ps(_mm_mul_ps(s4, r4[i]), _mm_mul_ps(z4, _mm_set1_ps(qsum[i]))));
        }
    for (; t < n; t++) {
        const uint8_t *row = codes + (size_t)t * P;
        const float *s = scale + (size_t)t * J, *z = offset ? offset + (size_t)t * J : NULL;
        float acc[3] = {0.f, 0.f, 0.f};
        for (int j = 0; j < J; j++) {
            float zj = z ? z[j] : -center * s[j];
            dots(qb, D, MB, row, bits, j * gv, (j + 1) * gv, res);
            for (int i = 0; i < MB; i++) acc[i] += s[j] * res[i] + zj * qsum[i * J + j];
        }
        for (int i = 0; i < MB; i++) out[(size_t)i * n + t] = acc[i];
    }
}

/* Scores against per-token groups: out[b,m,t] = sum_j scale[b,t,j] (q[b,m,j] . code[b,t,j]) + offset[b,t,j] sum(q[b,m,j]),
   j running over the J channel groups of g = D/J channels (g a multiple of 8). offset NULL: symmetric codes,
   offset = -center * scale. q (BH, M, D), codes (BH, n, D*bits/8), scale and offset (BH, n, J), out (BH, M, n). */
void token_scores(const float *q, const uint8_t *codes, const float *scale, const float *offset, float center,
                  float *out, int BH, int M, int n, int D, int bits, int J) {
    int P = D * bits / 8, g = D / J;
    float *qsum = malloc(sizeof(float) * M * J);
    for (int b = 0; b < BH; b++) {
        const float *qb = q + (size_t)b * M * D;
        for (int m = 0; m < M; m++) for (int j = 0; j < J; j++) {
            float s = 0.f;
            for (int d = j * g; d < (j + 1) * g; d++) s += qb[m * D + d];
            qsum[m * J + j] = s;
        }
        const uint8_t *cb = codes + (size_t)b * n * P;
        const float *sb = scale + (size_t)b * n * J, *zb = offset ? offset + (size_t)b * n * J : NULL;
        for (int m0 = 0; m0 < M; m0 += 3) {
            float *ob = out + ((size_t)b * M + m0) * n;
            switch (M - m0 < 3 ? M - m0 : 3) {
            case 1: token_scores_block(qb + m0 * D, qsum + m0 * J, 1, cb, sb, zb, center, ob, M, n, D, bits, J); break;
            case 2: token_scores_block(qb + m0 * D, qsum + m0 * J, 2, cb, sb, zb, center, ob, M, n, D, bits, J); break;
            default: token_scores_block(qb + m0 * D, qsum + m0 * J, 3, cb, sb, zb, center, ob, M, n, D, bits, J);
            }
        }
    }
    free(qsum);
}

/* Scores of MB queries (weights w = q * S_G, constants c = q . Z_G) against the r rows of one per-channel key group. */
static inline __attribute__((always_inline)) void channel_scores_block(const float *w, const float *c, int MB,
        const uint8_t *codes, float *out, int n, int D, int bits, int r) {
    int P = D * bits / 8, t = 0;
    float res[3];
    for (; t + 4 <= r; t += 4) {
        __m128 r4[3];
        dots4(w, D, MB, codes + (size_t)t * P, P, bits, 0, D / 8, r4);
        for (int i = 0; i < MB; i++) _mm_storeu_ps(out + (size_t)i * n + t, _mm_add_ps(r4[i], _mm_set1_ps(c[i])));
    }
    for (; t < r; t++) {
        dots(w, D, MB, codes + (size_t)t * P, bits, 0, D / 8, res);
        for (int i = 0; i < MB; i++) out[(size_t)i * n + t] = res[i] + c[i];
    }
}

/* Scores against per-channel key groups of r consecutive rows: out[b,m,t] = (q[b,m] * S[b,G]) . code[b,t] + q[b,m] . Z[b,G],
   G = t / r. q (BH, M, D), codes (BH, n, D*bits/8), S and Z (BH, n/r, D), out (BH, M, n). */
void channel_scores(const float *q, const uint8_t *codes, const float *S, const float *Z, float *out,
                    int BH, int M, int n, int D, int bits, int r) {
    int P = D * bits / 8, G = n / r;
    float *w = malloc(sizeof(float) * M * D), *c = malloc(sizeof(float) * M);
    for (int b = 0; b < BH; b++) {
        const float *qb = q + (size_t)b * M * D;
        for (int grp = 0; grp < G; grp++) {
            const float *Sg = S + ((size_t)b * G + grp) * D, *Zg = Z + ((size_t)b * G + grp) * D;
            for (int m = 0; m < M; m++) {
                float cm = 0.f;
                for (int d = 0; d < D; d++) { w[m * D + d] = qb[m * D + d] * Sg[d]; cm += qb[m * D + d] * Zg[d]; }
                c[m] = cm;
            }
            const uint8_t *cg = codes + ((size_t)b * n + grp * r) * P;
            for (int m0 = 0; m0 < M; m0 += 3) {
                float *og = out + ((size_t)b * M + m0) * n + grp * r;
                switch (M - m0 < 3 ? M - m0 : 3) {
                case 1: channel_scores_block(w + m0 * D, c + m0, 1, cg, og, n, D, bits, r); break;
                case 2: channel_scores_block(w + m0 * D, c + m0, 2, cg, og, n, D, bits, r); break;
                default: channel_scores_block(w + m0 * D, c + m0, 3, cg, og, n, D, bits, r);
                }
            }
        }
    }
    free(w); free(c);
}

/* 8 codes as their centroids, book[code] (codebook values): book holds at least 8 floats, 2**bits of them used. */
static inline __m256 book8(__m256 c, int bits, const float *book) {
    __m256i i = _mm256_cvttps_epi32(c);
    if (bits <= 3) return _mm256_permutevar8x32_ps(_mm256_loadu_ps(book), i);
    if (bits == 4) { /* permutes read an index's low 3 bits: the high half where bit 3 is set */
        __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(book), i), hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(book + 8), i);
        return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
    }
    return _mm256_i32gather_ps(book, i, 4);
}

/* The values' share of NV (2 or 4) channel vectors from 8*dv0 on, for MB (1-3) queries: out = sum_t ws[i,t,j] code[t,:],
   ws = p * scale. MB, NV and one_group (J == 1: one weight per token and query) are constants once inlined, so the
   MB*NV accumulators stay in registers. */
static inline __attribute__((always_inline)) void values_block(const float *ws, int n, int J, int MB, int NV, int one_group,
        const uint8_t *codes, int P, int bits, int dv0, int g, float *o, int D, const float *book) {
    __m256 acc[3][4], w[3];
    for (int i = 0; i < MB; i++) for (int v = 0; v < NV; v++) acc[i][v] = _mm256_setzero_ps();
    for (int t = 0; t < n; t++) {
        const uint8_t *row = codes + (size_t)t * P;
        if (one_group) for (int i = 0; i < MB; i++) w[i] = _mm256_broadcast_ss(ws + (size_t)i * n + t);
        for (int v = 0; v < NV; v++) {
            __m256 c = codes8(row, bits, dv0 + v);
            if (book) c = book8(c, bits, book);
            for (int i = 0; i < MB; i++)
                acc[i][v] = _mm256_fmadd_ps(one_group ? w[i] : _mm256_broadcast_ss(ws + ((size_t)i * n + t) * J + 8 * (dv0 + v) / g),
                                            c, acc[i][v]);
        }
    }
    for (int i = 0; i < MB; i++) for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + i * D + 8 * (dv0 + v), acc[i][v]);
}

#define VALUES_BLOCK(MB, NV, ONE) values_block(w, n, J, MB, NV, ONE, cb, P, bits, dv, g, ob + m0 * D, D, book)
#define VALUES_BY_MB(NV, ONE) switch (MB) { case 1: VALUES_BLOCK(1, NV, ONE); break; case 2: VALUES_BLOCK(2, NV, ONE); break; \
                                            default: VALUES_BLOCK(3, NV, ONE); }

/* Weighted sum of per-token-group values: out[b,m,:] = sum_t p[b,m,t] (scale[b,t,j] code[b,t,:] + offset[b,t,j]).
   p (BH, M, n), codes (BH, n, D*bits/8), scale and offset (BH, n, J), out (BH, M, D); D a multiple of 16. With a
   `book` (codebook values: J 1, no offset, center 0), each code stands for its centroid book[code]. */
void token_values(const float *p, const uint8_t *codes, const float *scale, const float *offset, float center,
                  float *out, int BH, int M, int n, int D, int bits, int J, const float *book) {
    int P = D * bits / 8, g = D / J;
    float *ws = malloc(sizeof(float) * M * n * J);
    for (int b = 0; b < BH; b++) {
        const float *pb = p + (size_t)b * M * n, *sb = scale + (size_t)b * n * J, *zb = offset ? offset + (size_t)b * n * J : NULL;
        const uint8_t *cb = codes + (size_t)b * n * P;
        float *ob = out + (size_t)b * M * D;
        for (int m = 0; m < M; m++) for (int j = 0; j < J; j++) {
            const float *pm = pb + (size_t)m * n;
            float *wm = ws + (size_t)m * n * J + j;
            #pragma omp simd
            for (int t = 0; t < n; t++) wm[(size_t)t * J] = pm[t] * sb[(size_t)t * J + j];
        }
        for (int m0 = 0; m0 < M; m0 += 3) {
            int MB = M - m0 < 3 ? M - m0 : 3;
            const float *w = ws + (size_t)m0 * n * J;
            for (int dv = 0; dv < D / 8; ) {
                if (D / 8 - dv >= 4) {
                    if (J == 1) { VALUES_BY_MB(4, 1) } else { VALUES_BY_MB(4, 0) }
                    dv += 4;
                } else {
                    if (J == 1) { VALUES_BY_MB(2, 1) } else { VALUES_BY_MB(2, 0) }
                    dv += 2;
                }
            }
        }
        for (int m = 0; m < M; m++) for (int j = 0; j < J; j++) { /* + sum_t p z per channel group: the offsets' share */
            const float *pm = pb + (size_t)m * n;
            float pz = 0.f;
            if (zb) {
                #pragma omp simd reduction(+:pz)
                for (int t = 0; t < n; t++) pz += pm[t] * zb[(size_t)t * J + j];
            } else {
                #pragma omp simd reduction(+:pz)
                for (int t = 0; t < n; t++) pz -= center * pm[t] * sb[(size_t)t * J + j];
            }
            for (int d = j * g; d < (j + 1) * g; d++) ob[m * D + d] += pz;
        }
    }
    free(ws);
}


static inline float half_up(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)); }
static inline float half_down(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)); }
static inline uint16_t half_bits(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); } /* v is already an fp16 value */

/* Quantise n rows of D floats in per-token groups of g = D/J channels, bit for bit as `kvstrat.quant.quantize` does
   (fp16 scales rounded up, fp16 zero-points rounded down, round half to even): packed (n, D*bits/8), scale and zero
   (n, J) as fp16 bits; zero NULL for symmetric codes. Returns 1, having checked every group before writing, when a
   value is NaN or Inf or beyond fp16's range: the caller then lets `quantize` raise its error. */
int quantize_rows(const float *x, uint8_t *packed, uint16_t *scale, uint16_t *zero, int n, int D, int bits, int J) {
    int g = D / J, P = D * bits / 8, top = (1 << bits) - 1, half = 1 << (bits - 1);
    for (size_t i = 0; i < (size_t)n * D; i++) if (!(fabsf(x[i]) <= 65504.f)) return 1; /* NaN fails the test too */
    uint8_t *codes = malloc(D);
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < J; j++) {
            const float *xg = x + (size_t)r * D + j * g;
            float lo = xg[0], hi = xg[0];
            for (int d = 1; d < g; d++) { lo = xg[d] < lo ? xg[d] : lo; hi = xg[d] > hi ? xg[d] : hi; }
            float s, z = 0.f;
            if (zero) {
                z = half_down(lo);
                s = half_up(fmaxf((hi - z) / (float)top, 0x1p-24f));
                zero[(size_t)r * J + j] = half_bits(z);
            } else s = half_up(fmaxf(fmaxf(-lo, hi) / (float)(half - 1), 0x1p-24f));
            scale[(size_t)r * J + j] = half_bits(s);
            for (int d = 0; d < g; d++) {
                float c = zero ? nearbyintf((xg[d] - z) / s) : nearbyintf(xg[d] / s) + (float)half;
                codes[j * g + d] = (uint8_t)(c < 0.f ? 0.f : c > (float)top ? (float)top : c);
            }
        }
        uint8_t *out = packed + (size_t)r * P; /* one little-endian bit stream: a 3-bit code may straddle two bytes */
        memset(out, 0, P);
        for (int d = 0; d < D; d++) {
            unsigned at = (unsigned)d * bits, c = (unsigned)codes[d] << (at & 7);
            out[at >> 3] |= (uint8_t)c;
            if (c >> 8) out[(at >> 3) + 1] |= (uint8_t)(c >> 8);
        }
    }
    free(codes);
    return 0;
}

/* ---- One layer's attention over every tier, head by head (`layer_read`) ----
   A head's rows may sit in any tiers, each in its own format, so the read takes one descriptor per (tier, head)
   segment: int64 fields, pointers already offset to the head's first row. */
enum { KIND_F16 = 0, KIND_F32 = 1, KIND_BF16 = 2, KIND_TOKEN = 3, KIND_CHANNEL = 4 };
enum { F_HEAD, F_N, F_KKIND, F_VKIND, F_KBITS, F_VBITS, F_KJ, F_VJ, F_KGROUP, F_SYM, F_LOG, F_ROT,
       F_KDATA, F_KSCALE, F_KZERO, F_VDATA, F_VSCALE, F_VZERO, F_POS, F_ROW, F_OBSERVABLE, F_VBOOK, N_FIELDS };

/* n stored parameters as float32: 8-bit log codes through `lut` (log), else fp16 bits. */
static void decode_params(const void *src, int log, const float *lut, size_t n, float *dst) {
    if (log) { const uint8_t *c = src; for (size_t i = 0; i < n; i++) dst[i] = lut[c[i]]; }
    else { const uint16_t *h = src; for (size_t i = 0; i < n; i++) dst[i] = _cvtsh_ss(h[i]); }
}

/* Row t of a float tier as D float32s (in `tmp` unless the tier is fp32 already). */
static inline const float *float_row(const void *rows, int kind, int t, int D, float *tmp) {
    if (kind == KIND_F32) return (const float *)rows + (size_t)t * D;
    if (kind == KIND_F16) {
        const uint16_t *h = (const uint16_t *)rows + (size_t)t * D;
        for (int d = 0; d < D; d += 8) _mm256_storeu_ps(tmp + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + d))));
    } else { /* bf16: the high half of a float32 */
        const uint16_t *h = (const uint16_t *)rows + (size_t)t * D;
        for (int d = 0; d < D; d += 8) {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + d)));
            _mm256_storeu_ps(tmp + d, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
    }
    return tmp;
}

static inline float dot(const float *a, const float *b, int D) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    return hsum(acc);
}

/* The scores (M, n) of one segment's keys, contiguous. */
static void segment_scores(const int64_t *s, const float *q, int M, int D, const float *lut, float *out) {
    int n = (int)s[F_N], bits = (int)s[F_KBITS], J = (int)s[F_KJ];
    if (s[F_KKIND] <= KIND_BF16) {
        float *tmp = malloc(sizeof(float) * D);
        for (int t = 0; t < n; t++) {
            const float *k = float_row((const void *)s[F_KDATA], (int)s[F_KKIND], t, D, tmp);
            for (int m = 0; m < M; m++) out[(size_t)m * n + t] = dot(q + (size_t)m * D, k, D);
        }
        free(tmp);
    } else if (s[F_KKIND] == KIND_TOKEN) {
        float *scale = malloc(sizeof(float) * n * J * 2), *zero = s[F_SYM] ? NULL : scale + (size_t)n * J;
        decode_params((const void *)s[F_KSCALE], (int)s[F_LOG], lut, (size_t)n * J, scale);
        if (zero) decode_params((const void *)s[F_KZERO], 0, lut, (size_t)n * J, zero);
        token_scores(q, (const uint8_t *)s[F_KDATA], scale, zero, (float)(1 << (bits - 1)), out, 1, M, n, D, bits, J);
        free(scale);
    } else { /* per-channel key groups of r rows, every group whole */
        int r = (int)s[F_KGROUP], G = n / r;
        float *S = malloc(sizeof(float) * G * D * 2), *Z = S + (size_t)G * D;
        decode_params((const void *)s[F_KSCALE], (int)s[F_LOG], lut, (size_t)G * D, S);
        decode_params((const void *)s[F_KZERO], 0, lut, (size_t)G * D, Z);
        channel_scores(q, (const uint8_t *)s[F_KDATA], S, Z, out, 1, M, n, D, bits, r);
        free(S);
    }
}

/* out (M, D) += p (M, n) · the segment's values. */
static void segment_values(const int64_t *s, const float *p, int M, int D, const float *lut, float *out) {
    int n = (int)s[F_N], bits = (int)s[F_VBITS], J = (int)s[F_VJ];
    if (s[F_VKIND] <= KIND_BF16) {
        float *tmp = malloc(sizeof(float) * D);
        for (int t = 0; t < n; t++) {
            const float *v = float_row((const void *)s[F_VDATA], (int)s[F_VKIND], t, D, tmp);
            for (int m = 0; m < M; m++) {
                __m256 w = _mm256_set1_ps(p[(size_t)m * n + t]);
                for (int d = 0; d < D; d += 8)
                    _mm256_storeu_ps(out + m * D + d, _mm256_fmadd_ps(w, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + m * D + d)));
            }
        }
        free(tmp);
        return;
    }
    const float *book = (const float *)s[F_VBOOK]; /* codebook values: no zero-points, no center */
    float *scale = malloc(sizeof(float) * (n * J * 2 + M * D)), *zero = s[F_SYM] || book ? NULL : scale + (size_t)n * J;
    float *part = scale + (size_t)n * J * 2;
    decode_params((const void *)s[F_VSCALE], (int)s[F_LOG], lut, (size_t)n * J, scale);
    if (zero) decode_params((const void *)s[F_VZERO], 0, lut, (size_t)n * J, zero);
    token_values(p, (const uint8_t *)s[F_VDATA], scale, zero, book ? 0.f : (float)(1 << (bits - 1)), part, 1, M, n, D,
                 bits, J, book);
    for (int i = 0; i < M * D; i++) out[i] += part[i];
    free(scale);
}

/* softmax(q·kᵀ + causal mask)·v of every head over its segments. q, qr (BH, M, D): scaled queries, and the same
   rotated for the segments stored rotated (qr NULL if none is); out, out_rot (BH, M, D): the plain and the rotated
   segments' shares (the caller rotates out_rot back); lse (BH, M): each query row's log-sum-exp (-inf, and a zero
   output, where a row sees nothing). A segment with a position array masks row t for query row m when
   pos[t] > qpos[m % nq]. With `probs` (rows, M) and `observe` (BH,): an observable segment of a head marked in
   `observe` writes each of its rows' probability under each query row, normalised over all the head's segments, at
   `probs` row `row` on (a strategy ranks rows by them); NULL `probs` writes none.
   The segments run on `threads` OpenMP threads, each with its own softmax maximum, sum and
   unnormalised values, merged into its head's running ones as split-K attention merges its splits: the scratch is
   one segment's per thread, whatever the number of heads. The merges run in segment order (an ordered region):
   merged in the order threads finished, float rounding made two runs of the same tokens differ. */
static inline int observed(const int64_t *s, const float *probs, const uint8_t *observe) {
    return probs && s[F_OBSERVABLE] && observe[s[F_HEAD]];
}

void layer_read(const float *q, const float *qr, const int64_t *desc, int S, const int64_t *qpos, int nq,
                const float *lut, float *out, float *out_rot, float *lse, float *probs, const uint8_t *observe,
                int BH, int M, int D, int threads) {
    memset(out, 0, sizeof(float) * BH * M * D);
    if (out_rot) memset(out_rot, 0, sizeof(float) * BH * M * D);
    float *top = malloc(sizeof(float) * BH * M * 2), *total = top + (size_t)BH * M; /* per head and query row */
    for (size_t r = 0; r < (size_t)BH * M; r++) { top[r] = -INFINITY; total[r] = 0.f; }
    #pragma omp parallel for ordered schedule(dynamic, 1) num_threads(threads)
    for (int i = 0; i < S; i++) {
        const int64_t *s = desc + i * N_FIELDS;
        int n = (int)s[F_N];
        float *sc = malloc(sizeof(float) * M * (n + 2 + D)), *mx = sc + (size_t)M * n, *sum = mx + M, *acc = sum + M;
        segment_scores(s, (s[F_ROT] ? qr : q) + (size_t)s[F_HEAD] * M * D, M, D, lut, sc);
        for (int m = 0; m < M; m++) {
            float *row = sc + (size_t)m * n;
            if (s[F_POS]) {
                const int32_t *pos = (const int32_t *)s[F_POS];
                for (int t = 0; t < n; t++) if (pos[t] > qpos[m % nq]) row[t] = -INFINITY;
            }
            if (observed(s, probs, observe)) { /* their scores now, their probabilities below */
                float *p = probs + (size_t)s[F_ROW] * M;
                for (int t = 0; t < n; t++) p[(size_t)t * M + m] = row[t];
            }
            mx[m] = -INFINITY; sum[m] = 0.f;
            for (int t = 0; t < n; t++) mx[m] = row[t] > mx[m] ? row[t] : mx[m];
            for (int t = 0; t < n; t++) { row[t] = mx[m] == -INFINITY ? 0.f : expf(row[t] - mx[m]); sum[m] += row[t]; }
        }
        memset(acc, 0, sizeof(float) * M * D);
        segment_values(s, sc, M, D, lut, acc);
        #pragma omp ordered
        for (int m = 0; m < M; m++) { /* the head's running share and this one's, at their joint maximum */
            size_t r = (size_t)s[F_HEAD] * M + m;
            if (mx[m] == -INFINITY) continue;
            float joint = mx[m] > top[r] ? mx[m] : top[r], old = expf(top[r] - joint), w = expf(mx[m] - joint);
            float *dst = (s[F_ROT] ? out_rot : out) + r * D; /* and the other share of the head, rescaled alike */
            float *other = s[F_ROT] ? out + r * D : (out_rot ? out_rot + r * D : NULL);
            for (int d = 0; d < D; d++) dst[d] = dst[d] * old + w * acc[(size_t)m * D + d];
            if (other && old != 1.f) for (int d = 0; d < D; d++) other[d] *= old;
            total[r] = total[r] * old + w * sum[m]; top[r] = joint;
        }
        free(sc);
    }
    for (int i = 0; i < S; i++) { /* observed rows: exp(score - the head's log-sum-exp over all its segments) */
        const int64_t *s = desc + i * N_FIELDS;
        if (!observed(s, probs, observe)) continue;
        float *p = probs + (size_t)s[F_ROW] * M;
        for (int t = 0; t < (int)s[F_N]; t++) for (int m = 0; m < M; m++) {
            size_t r = (size_t)s[F_HEAD] * M + m;
            p[(size_t)t * M + m] = total[r] > 0.f ? expf(p[(size_t)t * M + m] - top[r]) / total[r] : 0.f;
        }
    }
    for (size_t r = 0; r < (size_t)BH * M; r++) {
        if (lse) lse[r] = total[r] > 0.f ? top[r] + logf(total[r]) : -INFINITY;
        if (total[r] <= 0.f) continue;
        for (int d = 0; d < D; d++) { out[r * D + d] /= total[r]; if (out_rot) out_rot[r * D + d] /= total[r]; }
    }
    free(top);
}
