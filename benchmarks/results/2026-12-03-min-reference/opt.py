"""Exact optimum (hits) of a variable-size caching trace with bypass: the interval ILP.

x_t = 1 keeps access t's block in the cache from t until its next use n_t (a hit there); between
accesses tau and tau+1 the kept blocks' bytes fit the capacity. Solved with scipy's HiGHS MILP.
"""
import sys
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
from scipy.sparse import lil_matrix

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from tierload.simulator.belady import min_hit_flags, min_hits

d = np.load(sys.argv[1])
trace, sizes, cap, lengths = d["trace"], d["sizes"], int(d["capacity"]), d["lengths"]
T = len(trace)
nxt = np.full(T, -1)
last = {}
for t in range(T - 1, -1, -1):
    nxt[t] = last.get(int(trace[t]), -1)
    last[int(trace[t])] = t
cand = [t for t in range(T) if nxt[t] >= 0]
A = lil_matrix((T, len(cand)))
for j, t in enumerate(cand):
    for tau in range(t, nxt[t]):
        A[tau, j] = sizes[trace[t]]
res = milp(c=-np.ones(len(cand)), constraints=LinearConstraint(A.tocsr(), -np.inf, cap),
           integrality=np.ones(len(cand)), bounds=Bounds(0, 1))
x = np.round(res.x).astype(int)
hit_at = np.zeros(T, bool)
for j, t in enumerate(cand):
    if x[j]:
        hit_at[nxt[t]] = True
flags = min_hit_flags(trace, sizes, cap)
blocks_used = np.unique(trace)
print(f"accesses {T} per epoch {lengths.tolist()}; blocks {len(blocks_used)}; sizes of blocks used: "
      f"min {sizes[blocks_used].min()} max {sizes[blocks_used].max()} distinct {len(np.unique(sizes[blocks_used]))}; "
      f"capacity {cap} B")
print("Belady rule (min_hit_flags): hits", int(flags.sum()), "per epoch",
      [int(flags[s:s + n].sum()) for s, n in zip(np.cumsum([0, *lengths[:-1]]), lengths)],
      "exact:", min_hits(trace, sizes, cap).exact)
print("exact optimum (ILP, status %s):" % res.status, int(hit_at.sum()), "per epoch",
      [int(hit_at[s:s + n].sum()) for s, n in zip(np.cumsum([0, *lengths[:-1]]), lengths)])
