"""LongCE (lm_eval_longctx.training.longce) against a brute-force per-window computation on tiny random models."""

import math

import pytest
import torch
import torch.nn.functional as F

from lm_eval_longctx.training.longce import LongCELoss, longce_loss, short_context_ce
from tests.tiny import tiny_llama

K, D, GAMMA = 8, 3, 5.0
VOCAB = 97


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tiny_llama(vocab_size=VOCAB, seed=3)


def _rows(lengths=(23, 17), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=g) for n in lengths]


def _pad(rows, pad_id=0, garbage=False):
    width = max(len(r) for r in rows)
    g = torch.Generator().manual_seed(99)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    if garbage:  # padding content must not matter
        ids = torch.randint(3, VOCAB, (len(rows), width), generator=g)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = r
        mask[b, : len(r)] = 1
    return ids, mask


def _brute_force(model, row, gamma=GAMMA):
    """Per-target (full CE, weight) of one unpadded row, one separate forward per reference window."""
    n = len(row)
    with torch.no_grad():
        full = F.cross_entropy(model(row[None]).logits[0, :-1].float(), row[1:], reduction="none")
    weights = torch.ones(n - 1)
    for s in range(0, n - K, D):
        stop = s + K + min(D, n - s - K)
        with torch.no_grad():
            logits = model(row[None, s:stop]).logits[0].float()
        for t in range(s + K, stop):  # target t is predicted by window column t - s - 1
            short = F.cross_entropy(logits[t - s - 1][None], row[t][None]).item()
            weights[t - 1] = min(math.exp(short - full[t - 1].item()), gamma)
    return full, weights


def _run(model, ids, mask=None, labels=None, **kw):
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    out = longce_loss(model, logits, ids, labels, mask, trunc_len=K, stride=D, **kw)
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return out, grads


@pytest.mark.parametrize("gamma", [GAMMA, 1.5])
def test_weights_and_loss_match_brute_force(model, gamma):
    rows = _rows()
    ids, mask = _pad(rows)
    out, _ = _run(model, ids, mask, gamma=gamma)
    assert out.weights.grad_fn is None and not out.weights.requires_grad
    total, count = 0.0, 0
    for b, row in enumerate(rows):
        full, w = _brute_force(model, row, gamma)
        n = len(row)
        torch.testing.assert_close(out.weights[b, : n - 1], w, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out.token_ce[b, : n - 1].detach(), full, atol=1e-4, rtol=1e-4)
        assert (out.weights[b, n - 1 :] == 0).all() and not out.mask[b, n - 1 :].any()
        assert (w[: K - 1] == 1).all()
        total += float((w * full).sum())
        count += n - 1
    # the spec's mean(CE_t * w_t) over the real targets
    assert abs(out.loss.item() - total / count) < 1e-5
    # not vacuous: some weights are clamped, some are strictly between, some differ from 1
    scored = out.weights[:, K - 1 :][out.mask[:, K - 1 :]]
    assert ((scored < gamma) & ((scored - 1).abs() > 1e-3)).any()
    if gamma < 2:
        assert (scored == gamma).any()


def test_gradient_only_through_long_pass(model):
    ids, mask = _pad(_rows())
    out, grads = _run(model, ids, mask)

    # The same weights as constants: sum(w * ce) / norm of a fresh forward must give the same gradient.
    def token_ce():
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none").view(
            ids.shape[0], -1
        )

    ((out.weights * token_ce()).sum() / out.mask.sum()).backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-5, rtol=1e-4)
    # and it is not the plain-CE gradient (the weights matter)
    (token_ce() * out.mask).sum().div(out.mask.sum()).backward()
    assert any(not torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(grads, model.parameters()))


def test_padding_has_no_effect(model):
    rows = _rows((23, 17, 12))
    ids, mask = _pad(rows, garbage=True)
    labels = ids.clone()  # pad labels left as (garbage) tokens: the attention mask alone must exclude them
    out, grads = _run(model, ids, mask, labels)
    sum_loss, count, sum_grads = 0.0, 0, None
    for row in rows:
        single, g = _run(model, row[None])
        n = len(row) - 1
        sum_loss += single.loss.item() * n
        count += n
        sum_grads = [x * n for x in g] if sum_grads is None else [a + x * n for a, x in zip(sum_grads, g)]
    assert abs(out.loss.item() - sum_loss / count) < 1e-5
    for g, s in zip(grads, sum_grads):
        torch.testing.assert_close(g, s / count, atol=1e-5, rtol=1e-4)


def test_ignored_labels_and_reference_mode(model):
    row = _rows((21,))[0]
    ids = row[None]
    labels = ids.clone()
    labels[0, :12] = -100  # targets 1..11 ignored
    out, _ = _run(model, ids, labels=labels)
    full, w = _brute_force(model, row)
    keep = torch.arange(20) >= 11
    assert torch.equal(out.mask[0], keep)
    assert (out.weights[0, ~keep] == 0).all()
    assert abs(out.loss.item() - float((w * full)[keep].sum()) / int(keep.sum())) < 1e-5
    # reference: CE is 0 at -100, mean over all positions
    ref, _ = _run(model, ids, labels=labels, mask_ignored=False)
    assert abs(ref.loss.item() - float((w * full)[keep].sum()) / 20) < 1e-5


def test_reference_mode_does_not_mask_padding(model):
    rows = _rows((20, 14))
    ids, mask = _pad(rows)
    masked, _ = _run(model, ids, mask)
    # the reference treats every token as real: its training forward has no attention mask either
    ref, _ = _run(model, ids, None, mask_ignored=False)
    assert ref.mask.all() and not masked.mask.all()
    assert (ref.weights[1, 13:] > 0).all()  # padding targets are weighted and counted
    # reference weights over the padded row = brute force on the padded row itself
    _, w = _brute_force(model, ids[1])
    torch.testing.assert_close(ref.weights[1], w, atol=1e-4, rtol=1e-4)


def test_bad_input_raises(model):
    ids, mask = _pad(_rows())
    left = mask.flip(1)
    with pytest.raises(ValueError, match="right padding"):
        longce_loss(model, model(ids).logits, ids, attention_mask=left, trunc_len=K, stride=D)
    labels = ids.clone()
    labels[0, K + 2] = (labels[0, K + 2] + 1) % VOCAB
    with pytest.raises(ValueError, match="labels must equal input_ids"):
        longce_loss(model, model(ids).logits, ids, labels, mask, trunc_len=K, stride=D)


def test_short_pass_eval_mode_restores_flags():
    m = tiny_llama(vocab_size=VOCAB, seed=4, attention_dropout=0.5)
    m.train()
    m.model.layers[0].training = False  # a mixed state must come back as it was
    flags = [x.training for x in m.modules()]
    ids = _rows((19,))[0][None]
    a = short_context_ce(m, ids, [19], K, D)
    b = short_context_ce(m, ids, [19], K, D)
    assert [x.training for x in m.modules()] == flags
    torch.testing.assert_close(a, b, equal_nan=True)  # no dropout in the short pass
    assert torch.isnan(a[0, : K - 1]).all() and not torch.isnan(a[0, K - 1 :]).any()


def test_one_optimizer_step_on_cpu(model):
    m = tiny_llama(vocab_size=VOCAB, seed=5)
    m.train()
    loss_fn = LongCELoss(trunc_len=K, stride=D)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ids, mask = _pad(_rows())
    before = [p.detach().clone() for p in m.parameters()]
    loss = loss_fn(m, m(input_ids=ids, attention_mask=mask).logits, ids, ids, mask)
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item()) and loss_fn.last_output is not None
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
    assert m.training


def test_finetune_script_runs_two_trainer_steps(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "finetune_longce.py"
    spec = importlib.util.spec_from_file_location("finetune_longce", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = mod.main(["--tiny-demo", "--max-steps", "2", "--output-dir", str(tmp_path / "out")])
    assert result["steps"] == 2 and len(result["losses"]) == 2
    assert all(math.isfinite(x) for x in result["losses"])


@pytest.mark.integration
def test_finetune_script_measures_context_use_every_n_steps(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "finetune_longce.py"
    spec = importlib.util.spec_from_file_location("finetune_longce", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = ["--tiny-demo", "--max-steps", "2", "--eval-every", "1", "--eval-lengths", "64", "128", "--eval-docs", "2"]
    result = mod.main([*argv, "--output-dir", str(tmp_path / "out")])
    series = result["context_use"]
    assert [m["step"] for m in series] == [1, 2] and len(result["losses"]) == 2  # the loss is still logged each step
    assert all(math.isfinite(m["gain@L00064"]) and m["effective_length"] in (0, 64, 128) for m in series)
    written = sorted(p.parent.name for p in (tmp_path / "out" / "context_use").glob("checkpoint-*/results_*.json"))
    assert written == ["checkpoint-1", "checkpoint-2"]
