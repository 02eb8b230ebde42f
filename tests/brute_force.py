"""Slow, obviously-correct computations the engine and the tasks are checked against: one plain forward of exactly
what the model reads, log_softmax at the targets."""

from __future__ import annotations

import math

import torch


def last_logprob(model, ids):
    """log p(next token | ids) over the vocabulary, from one forward of ``ids``."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)


def brute_last(model, seq, k):
    """One full forward over the whole sequence: log p and greedy hits of its last k tokens."""
    seq = torch.as_tensor(seq)
    with torch.no_grad():
        logits = model(seq[None]).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    n = len(seq)
    pos = torch.arange(n - k, n)
    return lp[pos - 1, seq[pos]].numpy(), (logits[pos - 1].argmax(-1) == seq[pos]).numpy()


def brute_force_doc(text, evaluator, evaluated, K, d, alpha, beta):
    """Per-token forwards over exactly each token's context: slow and obviously right."""
    ev_model, ev_tok = evaluator
    enc = ev_tok(text, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        full = torch.log_softmax(ev_model(torch.tensor([ids])).logits[0].float(), -1)
    key_spans = []
    lsd = {}
    for t in range(K, len(ids)):
        s = ((t - K) // d) * d  # the reference window that scores t starts at s
        lp_long = float(full[t - 1, ids[t]])
        lp_short = float(last_logprob(ev_model, ids[s:t])[ids[t]])
        lsd[t] = lp_long - lp_short
        if lp_long - lp_short > alpha and lp_long > beta:
            a, b = offs[t]
            if key_spans and key_spans[-1][1] == a:
                key_spans[-1][1] = b
            else:
                key_spans.append([a, b])
    ev_offs = offs
    model, tok = evaluated
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
    nll = [-float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]
    key = [i - 1 for i in range(1, len(ids)) if any(s <= offs[i][0] and offs[i][1] <= e for s, e in key_spans)]
    # LongPPL-soft (gamma = 5): the weight of the evaluator token holding the token's last character
    weights = []
    for i in range(1, len(ids)):
        last = max(offs[i][1] - 1, offs[i][0])
        j = max(k for k, (a, _) in enumerate(ev_offs) if a <= last)
        weights.append(min(math.exp(lsd[j]), 5.0) if j in lsd else 1.0)
    soft = (sum(w * x for w, x in zip(weights, nll)), sum(weights))
    return sum(nll[i] for i in key), len(key), sum(nll), len(nll), key_spans, soft
