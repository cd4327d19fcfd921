#!/usr/bin/env python3
"""The search behind the set-up of AMLA's Tables 3 and 4 (sim/amla/README.md).

AMLA (arXiv 2509.25224) gives BF16 Q, K, V, 8K context and 100 samples, and leaves open how Q, K
and V relate, the number of query rows, the softmax scale and the output type. This script runs
numpy models of Base (Algorithm 1) and AMLA (Algorithm 2 with Appendix A's compensation) against
an FP64 Golden for candidate set-ups and prints, per candidate and metric, the ratio of our mean
error to the paper's figure for each of the twelve distributions. It is a fast exploration model
(FP64 matmuls rounded to FP32), not the bit-exact simulator: `attnsim repro amla` is the table of
record. Metrics: b_bf / b_f16 / b_f32 Base with BF16 / FP16 / FP32 output vs Golden on the BF16
inputs; b_bf_gu, b_f32_gu vs Golden on the unrounded inputs; gbf, gf16 Golden itself cast;
b_bf_gbf Base vs Golden cast to BF16; a_bf, a_f32 AMLA.

Examples (the candidates of sim/amla/README.md; 5 samples take ~1 min per scale):
  python3 experiments/python/amla_setup_search.py --samples 5                      # latent V, 4 scales
  python3 experiments/python/amla_setup_search.py --samples 5 --relation indep     # V independent of K
  python3 experiments/python/amla_setup_search.py --samples 5 --which Q --scales 576
  python3 experiments/python/amla_setup_search.py --samples 20 --scales 576,512 --amla
  python3 experiments/python/amla_setup_search.py --samples 20 --g 1 --scales 576
"""
import argparse
import json
import sys

import ml_dtypes
import numpy as np

BF = ml_dtypes.bfloat16
def bf(x): return np.asarray(x, np.float32).astype(BF).astype(np.float32)
def f16(x): return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
LN2 = np.float32(np.log(2.0))

def base(Q, K, V, scale, blk=512, pcast=bf):
    G = Q.shape[0]; N = K.shape[0]; Dv = V.shape[1]
    Q64 = Q.astype(np.float64)
    O = np.zeros((G, Dv), np.float32); m = np.full((G,1), -np.inf, np.float32); l = np.zeros((G,1), np.float32)
    for s in range(0, N, blk):
        S = (Q64 @ K[s:s+blk].astype(np.float64).T).astype(np.float32)
        S = S * np.float32(scale)
        mn = np.maximum(m, S.max(1, keepdims=True))
        P = np.exp(S - mn)
        al = np.exp(m - mn)
        l = l * al + P.sum(1, keepdims=True, dtype=np.float32)
        T = (pcast(P).astype(np.float64) @ V[s:s+blk].astype(np.float64)).astype(np.float32)
        O = O * al + T
        m = mn
    return O / l

def amla(Q, K, V, scale, blk=512):
    G = Q.shape[0]; N = K.shape[0]; Dv = V.shape[1]
    Q64 = Q.astype(np.float64)
    O = np.zeros((G, Dv), np.float32); m = np.full((G,1), -np.inf, np.float32); l = np.zeros((G,1), np.float32)
    n_prev = None; c_prev = np.ones((G,1), np.float32)
    for i, s in enumerate(range(0, N, blk)):
        S = (Q64 @ K[s:s+blk].astype(np.float64).T).astype(np.float32)
        S = S * np.float32(scale)
        mn = np.maximum(m, S.max(1, keepdims=True))
        Mup = np.exp(m - mn)
        n = np.round(-mn / LN2).astype(np.float32)
        P = np.exp(S - mn)
        l = l * Mup + P.sum(1, keepdims=True, dtype=np.float32)
        S32 = np.exp(LN2 * (n + mn / LN2)).astype(np.float32)
        S16 = bf(S32)
        c = S16 / S32   # appendix direction (r'/r ... as in brief)
        eps = np.float32(1.5) * (c / c_prev - np.float32(1))
        Pp = bf(P * S16)
        if i > 0:
            Nf = np.maximum(n - n_prev, np.float32(-30)) + eps + np.float32(1e-6)
            Ni = np.round(Nf.astype(np.float64) * 2**23).astype(np.int32)
            O = (O.view(np.int32) + Ni).view(np.float32)
        O = O + (Pp.astype(np.float64) @ V[s:s+blk].astype(np.float64)).astype(np.float32)
        m = mn; n_prev = n; c_prev = c
    return O / (l * S16)

def golden(Q, K, V, scale):
    S = (Q.astype(np.float64) @ K.astype(np.float64).T) * scale
    S -= S.max(1, keepdims=True)
    P = np.exp(S)
    return (P @ V.astype(np.float64)) / P.sum(1, keepdims=True)

def err(A, B):
    A = np.asarray(A, np.float64); B = np.asarray(B, np.float64)
    return np.linalg.norm(A - B) / (np.linalg.norm(B) + 1e-10)

PB = {'N1':1.77e-3,'N4':1.74e-3,'N9':1.65e-3,'N16':1.51e-3,'N25':1.33e-3,'N100':7.82e-4,
      'U1':1.97e-3,'U3':1.77e-3,'U5':1.69e-3,'U10':1.24e-3,'U20':7.04e-4,'U60':2.26e-4}
PA = {'N1':1.81e-3,'N4':1.75e-3,'N9':1.66e-3,'N16':1.51e-3,'N25':1.35e-3,'N100':7.86e-4,
      'U1':2.01e-3,'U3':1.78e-3,'U5':1.69e-3,'U10':1.24e-3,'U20':7.04e-4,'U60':2.26e-4}
def draw(rng, d, shape):
    if d[0]=='N': return rng.normal(0, np.sqrt(float(d[1:])), shape)
    a=float(d[1:]); return rng.uniform(-a, a, shape)
SC = {'576':1/np.sqrt(576),'192':1/np.sqrt(192),'512':1/np.sqrt(512),'1':1.0}
def run(nsamp=5, G=128, rel='latent', scales=('576','192','512','1'), which='QKV', do_amla=False, seed=0, N=8192):
    res = {}
    for d in PB:
        rng = np.random.default_rng(seed)
        rows = []
        for k in range(nsamp):
            Qr = draw(rng,d,(G,576)) if 'Q' in which else rng.normal(0,1,(G,576))
            Kr = draw(rng,d,(N,576)) if 'K' in which else rng.normal(0,1,(N,576))
            if rel=='latent': Vr = Kr[:, :512]
            else: Vr = draw(rng,d,(N,512)) if 'V' in which else rng.normal(0,1,(N,512))
            Q,K,V = bf(Qr),bf(Kr),bf(Vr)
            for sc in scales:
                s = SC[sc]
                ob = base(Q,K,V,s); og = golden(Q,K,V,s); ogu = golden(Qr,Kr,Vr,s)
                r = dict(sc=sc, b_bf=err(bf(ob),og), b_f16=err(f16(ob),og), b_f32=err(ob,og),
                         b_bf_gu=err(bf(ob),ogu), b_f32_gu=err(ob,ogu), gbf=err(bf(og),og), gf16=err(f16(og),og),
                         b_bf_gbf=err(bf(ob),bf(og)))
                if do_amla:
                    oa = amla(Q,K,V,s); r.update(a_bf=err(bf(oa),og), a_f32=err(oa,og), a_bf_gu=err(bf(oa),ogu))
                rows.append(r)
        res[d]=rows
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--g", type=int, default=128, help="query rows (heads of one token)")
    ap.add_argument("--relation", choices=["latent", "indep"], default="latent",
                    help="latent: V = K[:, :512]; indep: V drawn on its own")
    ap.add_argument("--scales", default="576,192,512,1", help="softmax scales 1/sqrt(x); 1 = none")
    ap.add_argument("--which", default="QKV", help="tensors drawn from the distribution (others N(0,1))")
    ap.add_argument("--amla", action="store_true", help="also run the AMLA model")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="also write the per-sample errors as JSON")
    a = ap.parse_args()
    if a.samples < 1 or a.g < 1:
        sys.exit("amla_setup_search: error: --samples and --g must be >= 1")
    scales = a.scales.split(",")
    if any(s not in SC for s in scales):
        sys.exit("amla_setup_search: error: --scales takes 576, 192, 512 or 1")
    cfg = dict(nsamp=a.samples, G=a.g, rel=a.relation, scales=scales, which=a.which,
               do_amla=a.amla, seed=a.seed)
    res = run(**cfg)
    if a.out:
        json.dump(dict(cfg=cfg, res=res), open(a.out, "w"))
    print("##", cfg)
    for sc in scales:
        for mt in ["b_bf", "b_f16", "b_f32", "b_bf_gu", "b_f32_gu", "gbf", "gf16", "b_bf_gbf",
                   "a_bf", "a_f32"]:
            if mt not in res["N1"][0]:
                continue
            P = PA if mt.startswith("a_") else PB
            rat = np.array([np.mean([r[mt] for r in res[d] if r["sc"] == sc]) / P[d] for d in P])
            print(f"scale 1/sqrt({sc:>3}) {mt:9s} max |ratio-1| {np.abs(rat - 1).max() * 100:6.1f}%  "
                  "ratios (N1 N4 N9 N16 N25 N100 U1 U3 U5 U10 U20 U60): " +
                  " ".join(f"{x:.3f}" for x in rat))


if __name__ == "__main__":
    main()
