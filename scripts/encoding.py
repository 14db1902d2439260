"""duet's encoding of a pair, in Python, from the `spec` of a model's model.json: what the
server's encoder (model/src/encoding.rs) computes, for clients of the KServe tensor
(scripts/check-clients.py checks the two agree through /v1/predict).

A job's vector: every numeric feature standardised (ln first where the spec says) followed by a
missing flag, every categorical feature one-hot with an unknown slot, then one slot per training
workload (set for a registered workload the model was trained on). A pair's row: job a, job b,
the device one-hot (plus unknown), the mode one-hot, and the two shares as fractions. A pair is
two rows, (a, b) then (b, a).
"""

import math


def encode_job(spec, features, workload=None):
    out = []
    for f in spec["numeric"]:
        v = features.get(f["name"])
        if isinstance(v, (int, float)) and math.isfinite(v) and (not f["log"] or v > 0):
            x = math.log(v) if f["log"] else v
            out += [(x - f["mean"]) / f["std"], 0.0]
        else:
            out += [0.0, 1.0]
    for c in spec["categorical"]:
        slots = [0.0] * (len(c["vocabulary"]) + 1)
        v = features.get(c["name"])
        if isinstance(v, str):
            vocabulary = c["vocabulary"]
            slots[vocabulary.index(v) if v in vocabulary else len(vocabulary)] = 1.0
        out += slots
    return out + [1.0 if known == workload else 0.0 for known in spec["identities"]]


def encode_context(spec, gpu, mode, share_a=None, share_b=None):
    gpus = spec["gpus"]
    device = [0.0] * (len(gpus) + 1)
    device[gpus.index(gpu) if gpu in gpus else len(gpus)] = 1.0
    modes = [1.0 if m == mode else 0.0 for m in spec["modes"]]
    shares = [0.0 if s is None else s / 100.0 for s in (share_a, share_b)]
    return device + modes + shares


def encode_pair(spec, a, b, gpu, mode, share_a=None, share_b=None):
    """The two rows of a pair; `a` and `b` are (features, workload id or None)."""
    ja, jb = encode_job(spec, *a), encode_job(spec, *b)
    return [
        ja + jb + encode_context(spec, gpu, mode, share_a, share_b),
        jb + ja + encode_context(spec, gpu, mode, share_b, share_a),
    ]
