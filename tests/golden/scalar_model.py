"""A second, deliberately naive implementation of the numerics contract (docs/numerics.md) in
plain Python integers, one element at a time. The vectorized golden/ model must agree with it
exactly; it shares no code with golden/ except the exponent table contents."""

import math


def _round_shift(x, s, rounding):
    if s == 0:
        return x
    q, r = x >> s, x & ((1 << s) - 1)
    half = 1 << (s - 1)
    if r > half or (r == half and (rounding == "half_up" or q & 1)):
        q += 1
    return q


def _requant(acc, m, s, bits, rounding):
    v = _round_shift(acc * m, s, rounding)
    return max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, v))


def softmax_row(t, mask, cfg, table):
    valid = [v for v, m in zip(t, mask) if not m]
    mx = max(valid) if valid else 0
    e = []
    for v, m in zip(t, mask):
        if m:
            e.append(0)
            continue
        diff = mx - v
        if cfg.exp_mode == "exp2":
            whole = diff >> cfg.score_frac_bits
            frac = diff & ((1 << cfg.score_frac_bits) - 1)
            addr = frac >> (cfg.score_frac_bits - cfg.lut_addr_bits)
            e.append(0 if whole >= cfg.exp_bits else int(table[addr]) >> whole)
        else:
            e.append(int(table[diff]) if diff < cfg.lut_size else 0)
    s = sum(e)
    p = [(x * cfg.prob_one + s // 2) // s if s else 0 for x in e]
    return e, s, p


def attention(cfg, qm, x, mask, table):
    seq_len, d = len(x), len(x[0])
    h = int(qm.num_heads)
    hd = d // h
    rnd = cfg.rounding
    qkv = [[_requant(sum(int(x[i][k]) * int(qm.w_in[c][k]) for k in range(d)) + int(qm.b_in[c]),
                     int(qm.in_mult[c]), int(qm.in_shift[c]), cfg.qkv_bits, rnd)
            for c in range(3 * d)] for i in range(seq_len)]
    concat = [[0] * d for _ in range(seq_len)]
    probs = []
    for head in range(h):
        cols = range(head * hd, (head + 1) * hd)
        head_probs = []
        for i in range(seq_len):
            t = [_requant(sum(qkv[i][c] * qkv[j][d + c] for c in cols),
                          int(qm.score_mult[head]), int(qm.score_shift[head]), cfg.score_bits,
                          rnd) for j in range(seq_len)]
            _, _, p = softmax_row(t, [bool(mask[i][j]) for j in range(seq_len)], cfg, table)
            head_probs.append(p)
            for c in cols:
                acc = sum(p[j] * qkv[j][2 * d + c] for j in range(seq_len))
                concat[i][c] = _requant(acc, int(qm.pv_mult[head]), int(qm.pv_shift[head]),
                                        cfg.head_bits, rnd)
        probs.append(head_probs)
    y = [[_requant(sum(concat[i][k] * int(qm.w_out[c][k]) for k in range(d)) + int(qm.b_out[c]),
                   int(qm.out_mult[c]), int(qm.out_shift[c]), cfg.y_bits, rnd)
          for c in range(d)] for i in range(seq_len)]
    return y, probs


def float_softmax(scores_in_units, log_base):
    mx = max(scores_in_units)
    ex = [math.exp((v - mx) * log_base) for v in scores_in_units]
    return [v / sum(ex) for v in ex]
