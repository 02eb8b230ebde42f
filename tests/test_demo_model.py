"""The demo model's hand-set copy circuit: what it attends to, that it copies, that training keeps it."""

import math

import numpy as np
import pytest
import torch

from lm_eval_longctx.demo import model as dm
from lm_eval_longctx.demo.offline import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(dm.training_texts(300_000), vocab_size=1024)


def small_recipe(**kw):
    # the demo's geometry with a short maximum length, so the tests stay fast
    return dm.Recipe(**{**dm.DEMO_RECIPE, "max_position_embeddings": 2048, **kw})


def copy_sample(tokenizer, length, seed=0):
    """[BOS] S [BOS] S from random ordinary tokens (no special ids)."""
    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(len(tokenizer)) if i not in special])
    s = rng.choice(vocab, size=length)
    bos = tokenizer.bos_token_id
    return torch.as_tensor(np.concatenate([[bos], s, [bos], s]))[None]


def test_previous_token_heads_attend_to_their_offset(tokenizer):
    r = small_recipe(rope_theta=1e4)
    model, _ = dm.build_model(tokenizer, r)
    model.config._attn_implementation = "eager"
    ids = copy_sample(tokenizer, 600)
    with torch.no_grad():
        att = model(ids, output_attentions=True).attentions[0][0]  # layer 0: [heads, T, T]
    T = ids.shape[1]
    for h in range(r.match_order):
        offset = h + 1
        rows = torch.arange(offset, T)
        on_target = att[h, rows, rows - offset]
        assert on_target.min().item() > 0.999, (h, on_target.min().item())


def test_untrained_circuit_copies_and_theta_sets_its_reach(tokenizer):
    """Second copy of S is predicted from the first: near-perfect at a short distance for any theta;
    at a long distance only the large-theta model still copies."""
    accs = {}
    for theta in (1e4, 1e6):
        model, _ = dm.build_model(tokenizer, small_recipe(rope_theta=theta))
        for length in (40, 900):
            ids = copy_sample(tokenizer, length, seed=length)
            with torch.no_grad():
                pred = model(ids).logits[0].argmax(-1)
            second = slice(length + 2 + small_recipe().match_order, 2 * length + 1)  # after the n-token lead-in
            targets = ids[0, second.start + 1 : second.stop + 1]
            accs[theta, length] = (pred[second] == targets).float().mean().item()
    assert accs[1e4, 40] > 0.97 and accs[1e6, 40] > 0.97, accs
    assert accs[1e6, 900] > 0.9, accs
    assert accs[1e4, 900] < accs[1e6, 900] - 0.3, accs


def test_match_windows_tile_the_matched_tokens():
    assert dm.match_windows(dm.Recipe(match_order=8, match_window=3)) == [(0, 3), (3, 3), (6, 2)]
    assert dm.match_windows(dm.Recipe(match_order=3)) == [(0, 3)]
    assert dm.match_windows(dm.Recipe(match_order=6, match_window=3)) == [(0, 3), (3, 3)]


@pytest.mark.parametrize("bad", [{"match_window": -1}, {"readout": 0.0, "readout_final": 32.0}])
def test_bad_circuit_settings_are_refused(tokenizer, bad):
    with pytest.raises(ValueError, match="match_window must be >= 0"):
        dm.build_model(tokenizer, small_recipe(**bad))


def test_voting_windows_copy_through_a_phrase_that_repeats_inside_the_copy(tokenizer):
    """S holds a 5-token phrase twice, followed by different tokens. Reading the second copy of S at the
    phrase's second occurrence, a 3-token match finds four sources (both occurrences in each copy) and
    splits; the 8-token match of ``EXACT_COPY_RECIPE`` (three voting windows) still follows the copy."""
    rng = np.random.default_rng(3)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(len(tokenizer)) if i not in special])
    words = rng.choice(vocab, size=200, replace=False)
    phrase = words[:5]
    s = np.concatenate([words[5:25], phrase, words[25:45], phrase, words[45:65]])
    length = len(s)
    bos = tokenizer.bos_token_id
    ids = torch.as_tensor(np.concatenate([[bos], s, [bos], s]))[None]
    # target: the token right after the phrase's second occurrence in the second copy
    target_pos = 1 + length + 1 + 20 + 5 + 20 + 5
    hits = {}
    for name, kw in {"one 3-token window": {"match_order": 3, "match_window": 0, "num_heads": 4, "head_dim": 0},
                     "exact-copy recipe": dm.EXACT_COPY_RECIPE}.items():
        model, _ = dm.build_model(tokenizer, small_recipe(**{**kw, "rope_theta": 1e6}))
        with torch.no_grad():
            logits = model(ids).logits[0]
        hits[name] = [int(logits[p - 1].argmax()) == int(ids[0, p]) for p in range(target_pos, target_pos + 3)]
    assert all(hits["exact-copy recipe"]), hits
    assert not all(hits["one 3-token window"]), hits


def test_control_has_no_circuit_and_nothing_frozen(tokenizer):
    model, frozen = dm.build_model(tokenizer, small_recipe(copy_circuit=False))
    assert not any(m.any() for m in frozen.values())
    ids = copy_sample(tokenizer, 40)
    with torch.no_grad():
        pred = model(ids).logits[0].argmax(-1)
    acc = (pred[45:81] == ids[0, 46:82]).float().mean().item()
    assert acc < 0.2


@pytest.mark.parametrize("recipe", [{}, dm.EXACT_COPY_RECIPE], ids=["demo", "exact-copy"])
def test_training_keeps_the_circuit_and_the_checkpoint_loads(tokenizer, tmp_path, recipe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = dm.training_texts(200_000)
    r = small_recipe(**recipe, steps=3, batch_size=2, seq_len=64, warmup_steps=1)
    record = dm.make_model(tmp_path / "m", r, tokenizer=tokenizer, texts=texts, dtype="float32", log=None)
    assert record["n_parameters"] > 0 and record["tokens"] == 3 * 2 * 64
    assert record["recipe"]["rope_theta"] == r.rope_theta
    before, frozen = dm.build_model(tokenizer, r)
    if r.readout_final:  # sharpened after training
        dm.sharpen_readout(before, r)
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "m").float()
    changed = 0
    for name, p in after.named_parameters():
        ref = dict(before.named_parameters())[name]
        m = frozen[name]
        assert torch.equal(p[m], ref[m]), name  # frozen entries exactly as built
        changed += int(not torch.equal(p[~m], ref[~m]))
    assert changed > 10  # and the rest did train
    assert AutoTokenizer.from_pretrained(tmp_path / "m").bos_token_id == tokenizer.bos_token_id
    assert math.isclose(after.config.rope_theta if hasattr(after.config, "rope_theta") else
                        after.config.rope_parameters["rope_theta"], r.rope_theta)


def test_training_batches_repeat_a_span(tokenizer):
    stream = np.arange(10_000, dtype=np.int64)  # all distinct: a repeat can only come from the recipe
    r = small_recipe(batch_size=64, seq_len=128, repeat_fraction=0.5)
    batch = dm.training_batch(stream, np.random.default_rng(0), r, bos_id=-1).numpy()
    assert batch.shape == (64, 128) and (batch[:, 0] == -1).all()
    repeated = [len(set(row[1:].tolist())) < 127 for row in batch]
    assert 16 < sum(repeated) < 48


@pytest.mark.slow
def test_packaged_model_copies_far_better_than_it_predicts():
    """The shipped trained model: copy accuracy >= LM accuracy + 0.30 at short copy lengths
    on held-out text (forgetting-curve samples from pydoc_data.topics)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lm_eval_longctx.data import documents as data
    from pydoc_data.topics import topics

    path = dm.packaged_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    stream = data.token_stream(tok, ["\n\n".join(topics[k] for k in sorted(topics))])
    for length in (32, 128):
        starts = data.sample_starts(len(stream), [length], 8, seed=1)[length]
        hits = {"copy": [], "lm": []}
        for b in starts:
            for mode in hits:
                ids = data.forgetting_curve_sample(stream, length, b, mode, tok.bos_token_id, tok.eos_token_id)
                first, stop = data.forgetting_curve_scored_targets(length)
                with torch.no_grad():
                    pred = model(torch.as_tensor(ids)[None]).logits[0].argmax(-1).numpy()
                hits[mode].append((pred[first - 1 : stop - 1] == ids[first:stop]).mean())
        gap = np.mean(hits["copy"]) - np.mean(hits["lm"])
        assert gap >= 0.30, (length, np.mean(hits["copy"]), np.mean(hits["lm"]))
