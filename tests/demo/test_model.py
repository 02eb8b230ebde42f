"""The demo model's hand-set copy circuit: what it attends to, that it copies, that training keeps it."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_eval_longctx.demo.model import (
    CODE_BAND_VARIANTS,
    COPY_ONLY_RECIPE,
    DEMO_RECIPE,
    EXACT_COPY_RECIPE,
    LOOKUP_RECIPE,
    ROPE_THETA_VARIANTS,
    VARIANTS,
    Layout,
    Recipe,
    build_model,
    inverse_frequencies,
    longeval_training_row,
    make_model,
    match_windows,
    packaged_model_dir,
    register_recency,
    sharpen_readout,
    sphere_points,
    token_stream,
    train_model,
    training_batch,
    training_texts,
    variants_for,
    vote_writes,
)
from lm_eval_longctx.demo.offline import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(training_texts(300_000), vocab_size=1024)


def recipe_from(base, **kw):
    # a recipe's geometry with a short maximum length, so the tests stay fast
    return Recipe(**{**base, "max_position_embeddings": 2048, **kw})


def small_recipe(**kw):
    # the first demo model's recipe (one induction head on three tokens): the circuit's basic tests
    return recipe_from(COPY_ONLY_RECIPE, **kw)


def copy_sample(tokenizer, length, seed=0):
    """[BOS] S [BOS] S from random ordinary tokens (no special ids)."""
    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    vocab = np.array([i for i in range(len(tokenizer)) if i not in special])
    s = rng.choice(vocab, size=length)
    bos = tokenizer.bos_token_id
    return torch.as_tensor(np.concatenate([[bos], s, [bos], s]))[None]


@pytest.mark.integration  # builds and runs a demo model: seconds
@pytest.mark.parametrize("bos_clean", [False, True])
def test_previous_token_heads_attend_to_their_offset(tokenizer, bos_clean):
    r = small_recipe(rope_theta=1e4, bos_clean=bos_clean)
    model, _ = build_model(tokenizer, r)
    model.config._attn_implementation = "eager"
    ids = copy_sample(tokenizer, 600)
    with torch.no_grad():
        att = model(ids, output_attentions=True).attentions[0][0]  # layer 0: [heads, T, T]
    T = ids.shape[1]
    is_bos = ids[0] == tokenizer.bos_token_id
    for h in range(r.match_order):
        offset = h + 1
        rows = torch.arange(offset, T)
        rows = rows[~is_bos[rows]]
        on_target = att[h, rows, rows - offset]
        assert on_target.min().item() > 0.999, (h, on_target.min().item())
        # with bos_clean a BOS (the sample's middle one) attends to a BOS, whose codes are 0: it carries no
        # earlier token's codes; without, it attends to its offset like any token
        mid = int(torch.nonzero(is_bos)[1, 0])
        if bos_clean:
            assert att[h, mid][is_bos].sum().item() > 0.999
        else:
            assert att[h, mid, mid - offset].item() > 0.999


def test_untrained_circuit_copies_and_theta_sets_its_reach(tokenizer):
    """Second copy of S is predicted from the first: near-perfect at a short distance for any theta;
    at a long distance only the large-theta model still copies."""
    accs = {}
    for theta in (1e4, 1e6):
        model, _ = build_model(tokenizer, small_recipe(rope_theta=theta))
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
    assert match_windows(Recipe(match_order=8, match_window=3)) == [(0, 3), (3, 3), (6, 2)]
    assert match_windows(Recipe(match_order=3)) == [(0, 3)]
    assert match_windows(Recipe(match_order=6, match_window=3)) == [(0, 3), (3, 3)]


@pytest.mark.parametrize("bad", [{"match_window": -1}, {"readout": 0.0, "readout_final": 32.0}])
def test_bad_circuit_settings_are_refused(tokenizer, bad):
    with pytest.raises(ValueError, match="match_window must be >= 0"):
        build_model(tokenizer, small_recipe(**bad))


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
    for name, base in {
        "one 3-token window": COPY_ONLY_RECIPE,
        "exact-copy recipe": EXACT_COPY_RECIPE,
        "one 8-token head": {**LOOKUP_RECIPE, "lookup": False, "ngram_readout": 0.0, "bigram_readout": 0.0},
    }.items():
        model, _ = build_model(tokenizer, recipe_from(base, rope_theta=1e6))
        with torch.no_grad():
            logits = model(ids).logits[0]
        hits[name] = [int(logits[p - 1].argmax()) == int(ids[0, p]) for p in range(target_pos, target_pos + 3)]
    assert all(hits["exact-copy recipe"]), hits
    assert all(hits["one 8-token head"]), hits
    assert not all(hits["one 3-token window"]), hits


def test_control_has_no_circuit_and_nothing_frozen(tokenizer):
    model, frozen = build_model(tokenizer, small_recipe(copy_circuit=False))
    assert not any(m.any() for m in frozen.values())
    ids = copy_sample(tokenizer, 40)
    with torch.no_grad():
        pred = model(ids).logits[0].argmax(-1)
    acc = (pred[45:81] == ids[0, 46:82]).float().mean().item()
    assert acc < 0.2


@pytest.mark.parametrize(
    "recipe",
    [COPY_ONLY_RECIPE, EXACT_COPY_RECIPE, {**LOOKUP_RECIPE, "longeval_fraction": 0.5}],
    ids=["copy-only (demo)", "exact-copy", "lookup"],
)
@pytest.mark.integration  # builds and runs a demo model: seconds
def test_training_keeps_the_circuit_and_the_checkpoint_loads(tokenizer, tmp_path, recipe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = training_texts(200_000)
    seq_len = 320 if recipe.get("lookup") else 64  # room for a LongEval record
    r = recipe_from(recipe, steps=3, batch_size=2, seq_len=seq_len, warmup_steps=1)
    record = make_model(tmp_path / "m", r, tokenizer=tokenizer, texts=texts, dtype="float32", log=None)
    assert record["n_parameters"] > 0 and record["tokens"] == 3 * 2 * seq_len
    assert record["recipe"]["rope_theta"] == r.rope_theta
    before, frozen = build_model(tokenizer, r)
    if r.readout_final:  # sharpened after training
        sharpen_readout(before, r)
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "m").float()
    changed = 0
    for name, p in after.named_parameters():
        ref = dict(before.named_parameters())[name]
        m = frozen[name]
        assert torch.equal(p[m], ref[m]), name  # frozen entries exactly as built
        changed += int(not torch.equal(p[~m], ref[~m]))
    assert changed > 10  # and the rest did train
    assert AutoTokenizer.from_pretrained(tmp_path / "m").bos_token_id == tokenizer.bos_token_id
    assert math.isclose(
        after.config.rope_theta if hasattr(after.config, "rope_theta") else after.config.rope_parameters["rope_theta"],
        r.rope_theta,
    )


def test_embedding_lr_scale_moves_only_the_embedding_and_output_layer_faster(tokenizer):
    """One AdamW step from the same start, embedding_lr_scale 1 and 3: Adam's first step is about lr in size for
    every entry with a gradient, so the input embedding's and the output layer's steps are 3 times as large and
    every other parameter steps exactly as before. A bad scale is refused."""
    texts = training_texts(100_000)
    stream = token_stream(tokenizer, texts)
    steps = {}
    for scale in (1.0, 3.0):
        r = recipe_from(
            COPY_ONLY_RECIPE,
            steps=1,
            batch_size=2,
            seq_len=64,
            warmup_steps=1,
            weight_decay=0.0,
            embedding_lr_scale=scale,
        )
        model, frozen = build_model(tokenizer, r)
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        train_model(model, frozen, stream, r, tokenizer.bos_token_id, log=None)
        steps[scale] = {n: (p.detach() - start[n]).abs() for n, p in model.named_parameters()}
    for name, step in steps[1.0].items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            moved = step > 0
            assert moved.sum() > 100, name
            ratio = steps[3.0][name][moved] / step[moved]
            assert torch.allclose(ratio.median(), torch.tensor(3.0), rtol=0.02), (name, ratio.median())
        else:
            assert torch.allclose(steps[3.0][name], step, atol=1e-7), name
    bad = recipe_from(COPY_ONLY_RECIPE, steps=1, batch_size=2, seq_len=64, embedding_lr_scale=0.0)
    model, frozen = build_model(tokenizer, bad)
    with pytest.raises(ValueError, match="embedding_lr_scale must be a positive number"):
        train_model(model, frozen, stream, bad, tokenizer.bos_token_id, log=None)


# ----------------------------------------------------------------------------- the line lookup


@pytest.fixture(scope="module")
def lookup_tokenizer():
    """The shipped demo model's tokenizer (4096 tokens): the lookup's markers and number pieces as it sees them."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(packaged_model_dir()))


def lookup_recipe(**kw):
    # the n-gram and bigram heads only where a test asks for them: these tests read the exact copy's and the
    # lookup's votes, which theirs would mix into (their tests are below)
    return recipe_from(
        LOOKUP_RECIPE, **{"max_position_embeddings": 4096, "ngram_readout": 0.0, "bigram_readout": 0.0, **kw}
    )


@pytest.mark.integration  # builds and runs a demo model: seconds
@pytest.mark.parametrize("theta", [1e4, 1e5, 1e6])
def test_register_recency_makes_the_most_recent_marker_win(theta):
    """Checked by brute force over every pair of distances: the profile falls by at least mu from any
    distance within the reach to every distance at least ``gap`` further."""
    freqs = inverse_frequencies(theta, 64)[:-1]
    reach, gap, max_len = 30, 16, 4096
    weights, mu = register_recency(freqs, reach, gap, max_len)
    assert weights.min() >= 0 and weights.sum() == pytest.approx(1.0) and mu > 0.1
    profile = np.cos(np.outer(np.arange(max_len + 1), freqs)) @ weights
    later_max = np.maximum.accumulate(profile[::-1])[::-1]  # max of profile[d:]
    drops = [profile[d] - later_max[d + gap] for d in range(reach + 1)]
    assert min(drops) >= mu - 1e-7


def answer_positions(tokenizer, case):
    """Token ids of the prompt + reference response and the positions of the number's tokens."""
    from lm_eval_longctx.data import longeval_cases

    resp, a0, a1 = longeval_cases.reference_response(case.name, case.expected_number)
    text = case.prompt + ("" if case.prompt.endswith(" ") else " ") + resp
    enc = tokenizer(text, return_offsets_mapping=True)
    start, end = len(text) - len(resp) + a0, len(text) - len(resp) + a1
    pos = [k for k, (a, b) in enumerate(enc["offset_mapping"]) if a >= start and b <= end and b > a]
    return torch.as_tensor([enc["input_ids"]]), pos, text


def has_line_piece(tokenizer, name):  # names like "uncovered-decline" hold the marker's piece "line"
    return any(
        tokenizer.decode([i]).strip() == "line" for i in tokenizer(" " + name, add_special_tokens=False)["input_ids"]
    )


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_untrained_lookup_reads_the_asked_lines_number(lookup_tokenizer):
    tokenizer = lookup_tokenizer
    """Teacher-forced on the reference response after LongEval prompts of 5 and 20 lines: the lookup
    predicts the asked line's number (measured: 0.927 of the pieces); the same model without it mostly does not."""
    from lm_eval_longctx.data import longeval_cases

    # Left out: the two known blind spots of the construction (docs/demo-and-known-answer-validation.md) -- a
    # name holding the marker's piece "line", and a number with a repeated piece (the lookup matches one
    # previous piece, so a repeat is ambiguous)
    def clear(c):
        pieces = tokenizer(str(c.expected_number), add_special_tokens=False)["input_ids"]
        return not has_line_piece(tokenizer, c.name) and len(set(pieces)) == len(pieces)

    cases = [c for n in (5, 20) for c in longeval_cases.generate_cases([n], 20, seed=0) if clear(c)]
    acc = {}
    for lookup in (True, False):
        model, _ = build_model(tokenizer, lookup_recipe(rope_theta=1e6, lookup=lookup))
        hits = []
        for case in cases:
            ids, pos, _ = answer_positions(tokenizer, case)
            with torch.no_grad():
                pred = model(ids).logits[0].argmax(-1)
            hits += [int(pred[p - 1]) == int(ids[0, p]) for p in pos]
        acc[lookup] = float(np.mean(hits))
    assert len(cases) >= 8
    assert acc[True] >= 0.9 and acc[False] < acc[True] - 0.3, acc


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_lookup_reads_the_number_and_is_silent_after_it(lookup_tokenizer):
    """Teacher-forced on the reference response: at each piece before the number's end the lookup head
    attends to the record (not to BOS); at ">" (after the number) it attends to BOS (value zero), so it
    does not continue the record past the number."""
    tokenizer = lookup_tokenizer
    from lm_eval_longctx.data import longeval_cases

    model, _ = build_model(tokenizer, lookup_recipe(rope_theta=1e6))
    model.config._attn_implementation = "eager"
    checked = 0
    for case in longeval_cases.generate_cases([10], 6, seed=0):
        if has_line_piece(tokenizer, case.name):
            continue
        ids, pos, text = answer_positions(tokenizer, case)
        with torch.no_grad():
            att = model(ids, output_attentions=True).attentions[2][0, 0]  # layer 2, head 0: the lookup
        pieces = [tokenizer.decode([int(i)]) for i in ids[0]]
        close = pos[-1] + 1
        assert pieces[close].strip() == ">"
        assert att[close, 0] > 0.9, (case.name, float(att[close, 0]))
        for p in pos:
            assert att[p - 1, 0] < 0.1, (case.name, p, float(att[p - 1, 0]))
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"num_layers": 2}, "the line lookup needs num_layers >= 3"),
        ({"match_dim": 22}, "three match codes on slow RoPE pairs"),
        ({"copy_code_dim": -1}, "copy_code_dim must be >= 0"),
        ({"code_scale": 0.0}, "code_scale and bos_flag must be > 0"),
        ({"bos_flag": -1.0}, "code_scale and bos_flag must be > 0"),
        ({"lookup_sink": 3.5}, "lookup_sink must lie between 4 and 6"),
        ({"register_gap": 0}, "register_gap >= 1"),
        ({"copy_code_dim": 0}, "copy_code_points draws copy codes from points of the sphere in 3 dims"),
        ({"copy_code_points": 0}, "first_sink tells the first position by its copy codes"),
        ({"copy_code_points": 400}, "lie too close together"),
        ({"first_sink_sharpness": 0.0}, "first_sink_sharpness must be a positive number"),
        ({"first_sink_sharpness": float("nan")}, "first_sink_sharpness must be a positive number"),
        ({"intermediate_size": 32}, "one layer-0 MLP neuron per copy-code point"),
        ({"ngram_readout": 8.0, "lookup": False}, "the n-gram head reads the lookup's match-code slot"),
        ({"ngram_readout": 8.0, "num_heads": 4, "head_dim": 64}, "layer 0 needs one head per matched token"),
        ({"ngram_readout": -1.0}, "ngram_readout must be >= 0"),
        ({"ngram_readout": float("nan")}, "ngram_readout must be >= 0"),
        ({"ngram_readout": 8.0, "ngram_sink": 3.0}, "ngram_sink between 2 and 3"),
        ({"code_band_offset": -1}, "code_band_offset must be a whole number of RoPE pairs from 0 to 16"),
        ({"code_band_offset": 17}, "code_band_offset must be a whole number of RoPE pairs from 0 to 16"),
        ({"code_band_offset": 1.5}, "code_band_offset must be a whole number"),
        ({"trained_norm_init": 0.0}, "trained_norm_init must be a positive number"),
        ({"trained_norm_init": float("inf")}, "trained_norm_init must be a positive number"),
    ],
)
def test_bad_lookup_settings_are_refused_before_building(lookup_tokenizer, bad, message):
    with pytest.raises(ValueError, match=message):
        build_model(lookup_tokenizer, lookup_recipe(**bad))


# ----------------------------------------------------------------------------- one head matching eight tokens


def pydoc_stream(tokenizer):
    from pydoc_data.topics import topics

    from lm_eval_longctx.data import documents

    return documents.token_stream(tokenizer, ["\n\n".join(topics[k] for k in sorted(topics))])


def readout_logits(model, r, ids):
    """The logits the circuit's readout adds (final-norm output on R times lm_head's R columns)."""
    lay = Layout.for_recipe(r)
    seen = {}
    hook = model.model.norm.register_forward_hook(lambda mod, i, o: seen.__setitem__("h", o[0]))
    with torch.no_grad():
        model(ids)
    hook.remove()
    return seen["h"][:, lay.read] @ model.lm_head.weight[:, lay.read].T


def wrong_token_margin(ro, target):
    """Per position: how far the best wrong token's readout logit lies above the right one's (0 when below)."""
    return (ro.scatter(1, target, -1e9).max(1).values - ro.gather(1, target)[:, 0]).clamp(min=0)


def forgetting_curve_hits(model, tok, stream, length, num_samples, mode="copy", seed=1):
    """Greedy hits on the forgetting curve's scored targets of ``num_samples`` samples (pooled, in sample order)."""
    from lm_eval_longctx.data import documents

    hits = []
    for b in documents.sample_starts(len(stream), [length], num_samples, seed=seed)[length]:
        ids = documents.forgetting_curve_sample(stream, length, b, mode, tok.bos_token_id, tok.eos_token_id)
        first, stop = documents.forgetting_curve_scored_targets(length)
        with torch.no_grad():
            pred = model(torch.as_tensor(ids)[None]).logits[0].argmax(-1).numpy()
        hits.append(pred[first - 1 : stop - 1] == ids[first:stop])
    return np.concatenate(hits)


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_one_head_matching_eight_tokens_quiets_stray_votes_and_keeps_the_copy(lookup_tokenizer):
    """Natural-text copies, untrained circuits at rope_theta 1e4 (reach about 300 tokens), readout 32 nats. Three
    windows that vote apart (``EXACT_COPY_RECIPE``) push a wrong token above the right one by 6.3 nats on average at
    1024 tokens (past the reach), where each window still finds chance matches; one head matching all eight tokens
    on 3-dim copy codes (``LOOKUP_RECIPE``) by 1.2. Within the reach (48 tokens) both copy."""
    from lm_eval_longctx.data import documents

    stream = pydoc_stream(lookup_tokenizer)
    bos, eos = lookup_tokenizer.bos_token_id, lookup_tokenizer.eos_token_id
    found = {}
    for name, base in {
        "windows": {**EXACT_COPY_RECIPE, "copy_code_dim": 0, "copy_code_points": 0, "first_sink": False},
        "one head": {**LOOKUP_RECIPE, "ngram_readout": 0.0, "bigram_readout": 0.0},
    }.items():
        r = lookup_recipe(**{**base, "rope_theta": 1e4, "readout": 32.0})
        model, _ = build_model(lookup_tokenizer, r)
        for length in (48, 1024):
            margins, hits = [], []
            for b in documents.sample_starts(len(stream), [length], 3, seed=1)[length]:
                ids = documents.forgetting_curve_sample(stream, length, b, "copy", bos, eos)
                ro = readout_logits(model, r, torch.as_tensor(ids)[None])[:-1]
                target = torch.as_tensor(ids[1:])[:, None]
                margins.append(wrong_token_margin(ro, target))
                first, stop = documents.forgetting_curve_scored_targets(length)
                hits.append((ro.argmax(-1)[first - 1 : stop - 1] == target[first - 1 : stop - 1, 0]).float())
            found[name, length] = (torch.cat(margins).mean().item(), torch.cat(hits).mean().item())
    assert found["windows", 1024][0] > 3.0 and found["one head", 1024][0] < 0.4 * found["windows", 1024][0], found
    assert found["one head", 48][1] > 0.97 and found["windows", 48][1] > 0.97, found
    assert found["one head", 1024][1] < 0.3, found  # past the reach it does not copy


def test_larger_codes_keep_the_copy_when_trained_parts_fill_the_residual(lookup_tokenizer):
    """Training fills the residual's free dimensions (in a trained model they held about half the squared norm of
    the layer-1 input), which shrinks every normed code and weakens the match against its sink. Simulated here by
    large random entries in the embedding's free columns: at code_scale 1 the copy breaks, at 4 it holds."""
    accs = {}
    for scale in (1.0, 4.0):
        # the copy head alone, at the sink level this was measured with (LOOKUP_RECIPE's 7.75 assumes a trained
        # model whose match scores keep their design: see votes_in_training)
        r = lookup_recipe(rope_theta=1e5, code_scale=scale, lookup=False, sink_level=6.5)
        model, _ = build_model(lookup_tokenizer, r)
        free = slice(Layout.for_recipe(r).reserved, r.hidden_size)
        with torch.no_grad():
            emb = model.model.embed_tokens.weight
            noise = torch.randn(emb.shape[0], free.stop - free.start, generator=torch.Generator().manual_seed(0))
            emb[:, free] = 3.5 * noise / noise.norm(dim=1, keepdim=True)  # norm 3.5 per token
            emb[lookup_tokenizer.bos_token_id, free] = 0.0
        ids = copy_sample(lookup_tokenizer, 64, seed=5)
        with torch.no_grad():
            ro = readout_logits(model, r, ids)
        vote = ro[65 + 8 : 129].gather(1, ids[0, 66 + 8 : 130, None])[:, 0]  # the copied token's readout logit
        accs[scale] = (vote > r.readout / 2).float().mean().item()  # copied with at least half the readout
    assert accs[4.0] > 0.97 and accs[1.0] < 0.2, accs


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_longeval_fraction_outside_0_1_is_refused(lookup_tokenizer, fraction):
    r = lookup_recipe(longeval_fraction=fraction, steps=1, batch_size=1, seq_len=320)
    model, frozen = build_model(lookup_tokenizer, r)
    with pytest.raises(ValueError, match="longeval_fraction is a fraction"):
        train_model(
            model,
            frozen,
            np.arange(5000, dtype=np.int64),
            r,
            lookup_tokenizer.bos_token_id,
            log=None,
            tokenizer=lookup_tokenizer,
        )


def test_longeval_training_rows_end_with_the_answer_and_eos(lookup_tokenizer):
    tokenizer = lookup_tokenizer
    rng = np.random.default_rng(0)
    for _ in range(5):
        ids = longeval_training_row(tokenizer, rng, 400)
        assert 0 < len(ids) <= 400 and ids[-1] == tokenizer.eos_token_id
        text = tokenizer.decode(ids[:-1])
        asked = text.rsplit("in line ", 1)[1].split("?")[0]
        value = text.split(f"line {asked}: REGISTER_CONTENT is <", 1)[1].split(">")[0]
        # "<n>" after a prompt that ends with a space, " <n>" after one that does not: the same text
        assert text.endswith(f"I need the number. <{value}>"), text[-80:]
    stream = np.arange(10_000, dtype=np.int64) + 5000
    r = lookup_recipe(batch_size=4, seq_len=512, longeval_fraction=1.0)
    batch = training_batch(
        stream, rng, r, tokenizer.bos_token_id, lambda g, m: longeval_training_row(tokenizer, g, m)
    ).numpy()
    assert batch.shape == (4, 512)
    with pytest.raises(ValueError, match="raise seq_len"):
        longeval_training_row(tokenizer, rng, 40)
    for row in batch:
        assert row[0] == tokenizer.bos_token_id and (row == tokenizer.eos_token_id).sum() == 1
        assert tokenizer.decode(row[1:20]).startswith("Below is a record of lines")


def test_training_batches_repeat_a_span(tokenizer):
    stream = np.arange(10_000, dtype=np.int64)  # all distinct: a repeat can only come from the recipe
    r = small_recipe(batch_size=64, seq_len=128, repeat_fraction=0.5)
    batch = training_batch(stream, np.random.default_rng(0), r, bos_id=-1).numpy()
    assert batch.shape == (64, 128) and (batch[:, 0] == -1).all()
    repeated = [len(set(row[1:].tolist())) < 127 for row in batch]
    assert 16 < sum(repeated) < 48


@pytest.mark.slow
def test_packaged_model_copies_far_better_than_it_predicts():
    """The shipped trained model: copy accuracy >= LM accuracy + 0.30 at short copy lengths
    on held-out text (forgetting-curve samples from pydoc_data.topics)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = packaged_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    stream = pydoc_stream(tok)
    for length in (32, 128):
        hits = {mode: forgetting_curve_hits(model, tok, stream, length, 8, mode) for mode in ("copy", "lm")}
        gap = np.mean(hits["copy"]) - np.mean(hits["lm"])
        assert gap >= 0.30, (length, np.mean(hits["copy"]), np.mean(hits["lm"]))


def demo_checkpoint():
    """The shipped demo model (DEMO_RECIPE, rope_theta 1e5), or the checkpoint of that recipe named by
    LM_EVAL_LONGCTX_DEMO_MODEL (e.g. a fresh ``scripts/make_demo_model.py OUT`` build, about 10 to 15 minutes on 2
    idle cores). A checkpoint of another recipe is refused: these figures were measured on this one."""
    import json
    import os
    from dataclasses import asdict

    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.environ.get("LM_EVAL_LONGCTX_DEMO_MODEL") or str(packaged_model_dir())
    recipe = json.loads(open(os.path.join(path, "recipe.json"), encoding="utf-8").read())["recipe"]
    assert recipe == json.loads(json.dumps(asdict(Recipe(**DEMO_RECIPE)))), f"{path} is not DEMO_RECIPE"
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.slow
def test_demo_model_copies_exactly_within_its_reach():
    """Copy accuracy > 0.99 at 64 and 256 tokens on held-out text (32 and 16 forgetting-curve samples, the task's
    scored targets; measured 0.993 and 0.992), falling at 4096, past the exact copy's reach at rope_theta 1e5
    (measured 0.635: the n-gram head, on the slowest pairs only, still finds part of the copy there). Enough
    samples that one rule of "**" (a run of one token, which the model mispredicts: see the first-position sink)
    does not decide the figure."""
    tok, model = demo_checkpoint()
    stream = pydoc_stream(tok)
    acc = {
        length: float(forgetting_curve_hits(model, tok, stream, length, n).mean())
        for length, n in ((64, 32), (256, 16), (4096, 2))
    }
    assert acc[64] > 0.99 and acc[256] > 0.99 and acc[4096] < 0.8, acc


@pytest.mark.slow
def test_demo_model_answers_longeval_lines():
    """Greedy answers to LongEval "lines" (10 cases of 10 lines, 10 of 20; evaluation seed 0, never trained on):
    the last number in the answer (as the task scores) is the asked line's in >= 8 of 10 at each size (measured 10
    and 9 of 10)."""
    import re

    from lm_eval_longctx.data import longeval_cases

    tok, model = demo_checkpoint()
    correct = {}
    for num_lines in (10, 20):
        correct[num_lines] = 0
        for index in range(10):
            case = longeval_cases.generate_case(num_lines, index, seed=0)
            ids = tok(case.prompt, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                out = model.generate(
                    ids,
                    max_new_tokens=20,
                    do_sample=False,
                    eos_token_id=tok.eos_token_id,
                    pad_token_id=tok.pad_token_id,
                )
            numbers = re.findall(r"\d+", tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
            correct[num_lines] += bool(numbers) and int(numbers[-1]) == case.expected_number  # as the task scores
    assert correct[10] >= 8 and correct[20] >= 8, correct


@pytest.mark.slow
def test_demo_model_predicts_held_out_text_as_well_as_the_first_model():
    """Next-token accuracy on 20 windows of 512 held-out pydoc tokens after a BOS, spread over the text, >= 0.20:
    the first demo model (COPY_ONLY_RECIPE, no exact copy or lookup) scored 0.206 on these windows, the lookup
    model without the bigram head and the embedding's learning rate 0.163, the shipped one 0.224 (measured). So
    the exact copy and the lookup did not cost the language model its accuracy."""
    tok, model = demo_checkpoint()
    stream = pydoc_stream(tok)
    hits = []
    for start in np.linspace(0, len(stream) - 600, 20).astype(int):
        x = torch.as_tensor(np.concatenate([[tok.bos_token_id], stream[start : start + 512]]))[None]
        with torch.no_grad():
            predicted = model(x).logits[0, :-1].argmax(-1)
        hits.append((predicted == x[0, 1:]).float().mean().item())
    assert np.mean(hits) >= 0.20, np.mean(hits)


@pytest.mark.slow
def test_packaged_model_is_what_its_recipe_builds(tmp_path):
    """The shipped checkpoint is what ``scripts/make_demo_model.py`` builds from DEMO_RECIPE on this Python (seed
    0; about 7 minutes on 2 idle cores): every tensor bit for bit, the tokenizer and the recorded recipe the same.
    The build is deterministic (two builds compared equal, one with the cores shared), so a difference means the
    construction, the recipe or the training code changed since the checkpoint was built: rebuild it."""
    import json
    import sys

    from safetensors.torch import load_file

    shipped = Path(packaged_model_dir())
    made_on = json.loads((shipped / "recipe.json").read_text(encoding="utf-8"))
    here = (sys.version.split()[0], torch.__version__)
    if here != (made_on["python"], made_on["torch"]):
        pytest.skip(
            f"the checkpoint was built on Python {made_on['python']} with torch {made_on['torch']}, this is "
            f"{here[0]} with {here[1]}: another Python ships other training text, another torch other kernels"
        )
    record = make_model(tmp_path / "model", Recipe(**DEMO_RECIPE), log=None)
    built = load_file(tmp_path / "model" / "model.safetensors")
    packaged = load_file(shipped / "model.safetensors")
    assert built.keys() == packaged.keys()
    differ = [n for n in built if not torch.equal(built[n], packaged[n])]
    assert not differ, f"rebuilt {differ} differ from {shipped}: rebuild it with scripts/make_demo_model.py"
    assert json.loads((tmp_path / "model" / "tokenizer.json").read_text(encoding="utf-8")) == json.loads(
        (shipped / "tokenizer.json").read_text(encoding="utf-8")
    )
    assert record["recipe"] == made_on["recipe"]


@pytest.mark.slow
def test_demo_model_needs_no_bos():
    """Held-out text scored without any special token (as the LongPPL task does) costs about what it costs with
    a BOS first: the first token becomes the sink."""
    tok, model = demo_checkpoint()
    stream = pydoc_stream(tok)
    nll = {}
    for bos in (True, False):
        losses = []
        for start in (20_000, 60_000, 100_000):
            ids = stream[start : start + 1024]
            ids = np.concatenate([[tok.bos_token_id], ids]) if bos else ids
            x = torch.as_tensor(ids)[None]
            with torch.no_grad():
                logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
            losses.append(-logp.gather(1, x[0, 1:, None])[-1000:, 0])  # the same last 1000 targets
        nll[bos] = torch.cat(losses).mean().item()
    assert nll[False] < nll[True] + 0.05, nll


# ----------------------------------------------------------------------------- a sink without a BOS


def layer1_flags(model, r, ids):
    """The BOS flag in the residual stream entering layer 1, per position: [batch, T]."""
    seen = {}
    hook = model.model.layers[1].input_layernorm.register_forward_hook(lambda m, i, o: seen.update(h=i[0]))
    with torch.no_grad():
        model(ids)
    hook.remove()
    return seen["h"][..., Layout.for_recipe(r).bos]


def expected_first_positions(points_of, ids, n):
    """The rule the sink neurons implement, written out: a position is flagged when it and the n positions its
    previous-token heads read hold tokens on one copy-code point. Before position n a head whose offset reaches
    past the start reads position 0 (as the heads are built; the test of their attention checks it)."""
    flagged = set()
    for t in range(len(ids)):
        read = [max(t - h, 0) for h in range(1, n + 1)]
        if points_of[ids[t]] >= 0 and all(points_of[ids[j]] == points_of[ids[t]] for j in read):
            flagged.add(t)
    return flagged


def token_points(tokenizer, r):
    """Each token's copy-code point (-1: no code), read back from the built embedding."""
    model, _ = build_model(tokenizer, r)
    lay = Layout.for_recipe(r)
    codes = model.model.embed_tokens.weight[:, lay.copy] / r.code_scale
    points = sphere_points(r.copy_code_points)
    cos = codes @ points.T
    best = cos.argmax(1)
    return model, torch.where(cos.max(1).values > 0.999, best, torch.full_like(best, -1)).tolist()


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_first_position_becomes_a_sink_without_a_bos(lookup_tokenizer):
    """Every ordinary token at position 0 gets at least bos_flag in its BOS flag; position 1 never does when its
    token's copy-code point differs (every pair of points tried), so a window that starts mid-text has a sink."""
    r = lookup_recipe(rope_theta=1e5)
    model, points_of = token_points(lookup_tokenizer, r)
    by_point = {}
    for tok, p in enumerate(points_of):
        if p >= 0:
            by_point.setdefault(p, []).append(tok)
    assert len(by_point) == r.copy_code_points  # every point is used
    rng = np.random.default_rng(0)
    pairs = [(rng.choice(by_point[p]), rng.choice(by_point[q])) for p in by_point for q in by_point if p != q]
    flags = layer1_flags(model, r, torch.as_tensor(pairs))
    assert flags[:, 0].min() >= r.bos_flag and flags[:, 1].abs().max() < 1.0
    # every ordinary token as the first one (digits and "line" carry extra flags: the filler evens their norm)
    ordinary = [t for t, p in enumerate(points_of) if p >= 0]
    second = rng.choice(ordinary, size=len(ordinary))
    keep = [i for i, (a, b) in enumerate(zip(ordinary, second)) if points_of[a] != points_of[b]]
    ids = torch.as_tensor([[ordinary[i], second[i]] for i in keep])
    flags = layer1_flags(model, r, ids)
    assert flags[:, 0].min() >= r.bos_flag and flags[:, 1].abs().max() < 1.0


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_first_position_flags_follow_the_written_out_rule(lookup_tokenizer):
    """Random text with runs: one token nine times (a run the heads cannot tell from a first position: every
    value they read is the same token's, a documented limit), eight times (not enough), and nine distinct tokens
    on one point. The flagged positions equal the rule's, with and without a BOS."""
    r = lookup_recipe(rope_theta=1e5)
    model, points_of = token_points(lookup_tokenizer, r)
    rng = np.random.default_rng(1)
    ordinary = np.array([t for t, p in enumerate(points_of) if p >= 0])
    same_point = [t for t in ordinary if points_of[t] == points_of[ordinary[0]]][:9]
    parts = [
        rng.choice(ordinary, 40),
        [ordinary[3]] * 9,
        rng.choice(ordinary, 30),
        [ordinary[5]] * 8,
        rng.choice(ordinary, 30),
        same_point,
        rng.choice(ordinary, 20),
    ]
    text = np.concatenate(parts)
    for ids in (text, np.concatenate([[lookup_tokenizer.bos_token_id], text])):
        flags = layer1_flags(model, r, torch.as_tensor(ids)[None])[0]
        found = set(torch.nonzero(flags >= r.bos_flag)[:, 0].tolist())
        expected = expected_first_positions(points_of, ids.tolist(), r.match_order)
        if ids[0] == lookup_tokenizer.bos_token_id:
            assert 0 not in expected
            expected.add(0)  # BOS's own flag
        assert found == expected and 0 in found and len(found) >= 3
        assert ((flags.abs() < 1.0) | (flags >= r.bos_flag)).all()  # no half-open gate
    off = lookup_recipe(rope_theta=1e5, first_sink=False)
    model_off, _ = build_model(lookup_tokenizer, off)
    assert layer1_flags(model_off, off, torch.as_tensor(text)[None]).abs().max() < 1.0


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_without_a_bos_the_copy_head_stays_quiet_in_ordinary_text(lookup_tokenizer):
    """Ordinary text with no BOS anywhere (the LongPPL task's windows): without the first-position sink the copy
    head has nowhere to put its attention when nothing matches and votes 32 nats for a wrong token; with it the
    readout's wrong-token margin is what it is with a BOS."""
    stream = pydoc_stream(lookup_tokenizer)
    text = stream[30000:31500]
    margins = {}
    for first_sink in (True, False):
        r = lookup_recipe(rope_theta=1e5, readout=32.0, first_sink=first_sink)
        model, _ = build_model(lookup_tokenizer, r)
        for bos in (True, False):
            ids = np.concatenate([[lookup_tokenizer.bos_token_id], text]) if bos else text
            ro = readout_logits(model, r, torch.as_tensor(ids)[None])[:-1]
            target = torch.as_tensor(ids[1:])[:, None]
            margins[first_sink, bos] = wrong_token_margin(ro, target).mean().item()
    assert margins[False, False] > 10 * margins[False, True], margins  # the failure the sink mends
    assert margins[True, False] < 1.3 * margins[True, True] + 0.1 and margins[True, True] < 3.0, margins


# ----------------------------------------------------------------------------- the n-gram head, training


def ngram_scores(model, r, ids):
    """The n-gram head's match score of every (t, j), in matching tokens, written out from the embedding's codes:
    m(x_t) . m(x_{j-1}) + c(x_{t-1}) . c(x_{j-2}) + c(x_{t-2}) . c(x_{j-3}) for 3 <= j <= t (-inf elsewhere). RoPE
    is left out: the slow pairs the head uses turn by less than 0.1 rad over these few hundred tokens."""
    lay = Layout.for_recipe(r)
    emb = model.model.embed_tokens.weight.detach()[ids] / r.code_scale
    mm = emb[:, lay.match] @ emb[:, lay.match].T
    cc = emb[:, lay.copy] @ emb[:, lay.copy].T
    T = len(ids)
    s = torch.full((T, T), float("-inf"))
    for t in range(2, T):
        j = torch.arange(3, t + 1)
        s[t, j] = mm[t, j - 1] + cc[t - 1, j - 2] + cc[t - 2, j - 3]
    return s


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_ngram_head_votes_where_the_last_three_tokens_recur(lookup_tokenizer):
    """Random ordinary text with planted repeats of three tokens, untrained circuit: where the written-out score
    of one earlier place clears the sink by a quarter token (4 nats) and every other place lies half a token (8 nats)
    below it, the readout votes about ngram_readout nats for the token that followed there; where no place comes
    within half a token of the sink, it votes next to nothing. (Eight tokens never recur here, so the exact copy head is silent.)"""
    r = lookup_recipe(rope_theta=1e5, readout=32.0, ngram_readout=8.0)
    model, points_of = token_points(lookup_tokenizer, r)
    lay = Layout.for_recipe(r)
    emb = model.model.embed_tokens.weight.detach()
    flagged = emb[:, [lay.number_query, lay.number_value, lay.marker]].abs().sum(1) > 0  # digits, "<", ">", "line"
    vocab = [t for t, p in enumerate(points_of) if p >= 0 and not flagged[t]]
    rng = np.random.default_rng(0)
    ids = rng.choice(vocab, size=400)
    for q in rng.choice(np.arange(220, 400, 12), size=12, replace=False):  # x_{q-2..q} = x_{p-3..p-1}: vote x_p
        p = int(rng.integers(10, 200))
        ids[q - 2 : q + 1] = ids[p - 3 : p]
    ids = np.concatenate([[lookup_tokenizer.bos_token_id], ids])
    s = ngram_scores(model, r, torch.as_tensor(ids))
    ro = readout_logits(model, r, torch.as_tensor(ids)[None])
    confident, quiet = 0, 0
    for t in range(3, len(ids)):
        order = torch.sort(s[t], descending=True)
        best, second, j = order.values[0].item(), order.values[1].item(), order.indices[0].item()
        if best > r.ngram_sink + 0.25 and second < best - 0.5:
            assert ro[t].argmax().item() == ids[j] and ro[t].max().item() > 0.9 * r.ngram_readout, (t, best)
            confident += 1
        elif best < r.ngram_sink - 0.5:
            assert ro[t].max().item() < 0.1 * r.ngram_readout, (t, best, ro[t].max().item())
            quiet += 1
    assert confident >= 8 and quiet >= 100, (confident, quiet)  # 11 and 137 as written
    # without the head nothing votes at the planted places
    plain = lookup_recipe(rope_theta=1e5, readout=32.0)
    model0, _ = build_model(lookup_tokenizer, plain)
    assert readout_logits(model0, plain, torch.as_tensor(ids)[None]).max().item() < 1.0


def bigram_scores(model, r, ids):
    """The bigram head's match score of every (t, j), in matching codes, written out from the embedding's codes:
    m(x_t) . m(x_{j-1}) + c(x_t) . c(x_{j-1}) for 1 <= j <= t (-inf elsewhere); RoPE left out as in ngram_scores."""
    lay = Layout.for_recipe(r)
    emb = model.model.embed_tokens.weight.detach()[ids] / r.code_scale
    both = emb[:, lay.match] @ emb[:, lay.match].T + emb[:, lay.copy] @ emb[:, lay.copy].T
    T = len(ids)
    s = torch.full((T, T), float("-inf"))
    for t in range(1, T):
        j = torch.arange(1, t + 1)
        s[t, j] = both[t, j - 1]
    return s


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_bigram_head_votes_for_what_followed_the_token_before(lookup_tokenizer):
    """Random ordinary text in which some tokens recur, untrained circuit; the bigram head's own vote (readout with
    it minus readout without it): where x_t occurred once before (written-out score 2 at that place, every other
    place a quarter code (4 nats) or more below the sink) it votes about bigram_readout nats for the token that
    followed it there; where it occurred twice, with two different tokens after it, half that for each (plus what
    the two tokens' output codes share);
    where no place comes within half a code of the sink, next to nothing. (Among 400 random tokens the best
    chance score is 1.47 codes at the median: two codes of one token tell 4096 tokens apart only roughly, hence
    the sink at 1.75.)"""
    r = lookup_recipe(rope_theta=1e5, readout=32.0, ngram_readout=8.0, bigram_readout=6.0)
    model, points_of = token_points(lookup_tokenizer, r)
    plain = lookup_recipe(rope_theta=1e5, readout=32.0, ngram_readout=8.0)
    model0, _ = build_model(lookup_tokenizer, plain)
    lay = Layout.for_recipe(r)
    emb = model.model.embed_tokens.weight.detach()
    flagged = emb[:, [lay.number_query, lay.number_value, lay.marker]].abs().sum(1) > 0  # digits, "<", ">", "line"
    vocab = [t for t, p in enumerate(points_of) if p >= 0 and not flagged[t]]
    rng = np.random.default_rng(0)
    ids = rng.choice(vocab, size=400, replace=False)
    for q in range(220, 400, 12):  # x_q = x_{p-1}: vote x_p; every other plant also copies a second earlier place
        p = int(rng.integers(10, 100))
        ids[q] = ids[p - 1]
        if q % 24 == 4:
            ids[p + 100] = ids[p - 1]  # x_q also occurred at p + 100, followed by another token
    ids = np.concatenate([[lookup_tokenizer.bos_token_id], ids])
    x = torch.as_tensor(ids)
    s = bigram_scores(model, r, x)
    vote = readout_logits(model, r, x[None]) - readout_logits(model0, plain, x[None])
    out_codes = torch.nn.functional.normalize(emb[:, lay.output], dim=1)
    once, twice, quiet = 0, 0, 0
    for t in range(1, len(ids)):
        full = (s[t] > 1.95).nonzero().flatten().tolist()  # both codes match: x_t occurred at j - 1
        rest = s[t].clone()
        rest[full] = float("-inf")
        if full and rest.max() < r.bigram_sink - 0.25:
            # attention split evenly over the places: R = mean of their output codes, so each follower f gets
            # bigram_readout * mean_j o(x_j) . o(f) (the output codes are not orthogonal)
            mixed = out_codes[ids[full]].mean(0)
            for f in set(int(ids[j]) for j in full):
                expected = r.bigram_readout * (mixed @ out_codes[f]).item()
                assert abs(vote[t, f].item() - expected) < 0.1 * r.bigram_readout, (t, full, expected)
            once += len(full) == 1
            twice += len(full) == 2 and ids[full[0]] != ids[full[1]]
        elif not full and s[t].max() < r.bigram_sink - 0.5:
            assert vote[t].abs().max().item() < 0.1 * r.bigram_readout, (t, vote[t].abs().max().item())
            quiet += 1
    assert once >= 5 and twice >= 3 and quiet >= 30, (once, twice, quiet)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"bigram_readout": 6.0, "ngram_readout": 0.0}, "needs ngram_readout > 0"),
        ({"bigram_readout": -1.0}, "bigram_readout must be >= 0"),
        ({"bigram_readout": 6.0, "bigram_sink": 2.0}, "between 1 and 2"),
    ],
)
def test_bad_bigram_settings_are_refused(lookup_tokenizer, bad, message):
    with pytest.raises(ValueError, match=message):
        build_model(lookup_tokenizer, lookup_recipe(**{"ngram_readout": 8.0, **bad}))


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_trained_norm_init_starts_only_the_trained_dims(lookup_tokenizer):
    r = lookup_recipe(trained_norm_init=8.0)
    model, frozen = build_model(lookup_tokenizer, r)
    reserved = Layout.for_recipe(r).reserved
    norms = {n: p for n, p in model.named_parameters() if n.endswith("norm.weight")}
    assert len(norms) == 2 * r.num_layers + 1
    for name, p in norms.items():
        assert torch.all(p[:reserved] == 1.0) and torch.all(p[reserved:] == 8.0), name
        assert frozen[name][:reserved].all() and not frozen[name][reserved:].any(), name


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_copy_and_lookup_votes_are_silent_in_training_and_set_after_it(lookup_tokenizer, tmp_path, monkeypatch):
    """votes_in_training=False: while the other parts train, the exact copy's and the lookup's writes into R are
    zero (the n-gram head's are not); the saved checkpoint has them as built (and sharpened)."""
    from transformers import AutoModelForCausalLM

    r = lookup_recipe(votes_in_training=False, ngram_readout=8.0, steps=2, batch_size=2, seq_len=320, warmup_steps=1)
    hd = r.hidden_size // r.num_heads if not r.head_dim else r.head_dim
    read = Layout.for_recipe(r).read
    seen = {}
    real_train = train_model

    def sizes(model):
        silenced = [w[rows, cols].abs().max().item() for w, rows, cols in vote_writes(model, r)]
        ngram = model.model.layers[1].self_attn.o_proj.weight[read, 3 * hd : 4 * hd].abs().max().item()
        return silenced, ngram

    def spy(model, *args, **kwargs):
        seen["before"] = sizes(model)
        out = real_train(model, *args, **kwargs)
        seen["after"] = sizes(model)
        return out

    monkeypatch.setattr("lm_eval_longctx.demo.model.train_model", spy)
    make_model(tmp_path / "m", r, tokenizer=lookup_tokenizer, texts=training_texts(200_000), dtype="float32", log=None)
    assert len(seen["before"][0]) == 2 and seen["before"][0] == [0.0, 0.0] and seen["after"][0] == [0.0, 0.0]
    assert seen["before"][1] > 0 and seen["after"][1] == seen["before"][1]
    built, _ = build_model(lookup_tokenizer, r)
    sharpen_readout(built, r)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "m").float()
    for (w, rows, cols), (w0, rows0, cols0) in zip(vote_writes(saved, r), vote_writes(built, r)):
        assert w[rows, cols].abs().max() > 0 and torch.equal(w[rows, cols], w0[rows0, cols0])


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_the_lookup_sink_changes_one_bias_and_nothing_that_trains(lookup_tokenizer, tmp_path):
    """With the votes silent in training, the lookup's sink level cannot steer training: two builds that differ
    only in lookup_sink save the same weights (to float rounding) but the lookup's sink bias (layer 2, head 0, the
    slowest pair), in the ratio of the levels. So a trained model's lookup sink can be measured by patching that
    bias, which is how LOOKUP_RECIPE's 5 parts were chosen."""
    from transformers import AutoModelForCausalLM

    saved = {}
    texts = training_texts(200_000)
    for level in (4.5, 5.0):
        r = lookup_recipe(
            votes_in_training=False,
            ngram_readout=8.0,
            lookup_sink=level,
            steps=2,
            batch_size=2,
            seq_len=320,
            warmup_steps=1,
        )
        make_model(tmp_path / str(level), r, tokenizer=lookup_tokenizer, texts=texts, dtype="float32", log=None)
        saved[level] = AutoModelForCausalLM.from_pretrained(tmp_path / str(level)).float().state_dict()
    hd = r.head_dim or r.hidden_size // r.num_heads
    sink = hd // 2 - 1
    bias = "model.layers.2.self_attn.q_proj.bias"
    low, high = saved[4.5], saved[5.0]
    assert low.keys() == high.keys()
    assert high[bias][sink] / low[bias][sink] == pytest.approx(5.0 / 4.5, rel=1e-6)
    for name in low:
        a, b = low[name].clone(), high[name].clone()
        if name == bias:
            a[sink] = b[sink] = 0.0
        # equal up to float rounding (measured at most 1e-6): the silent head's other scores change the order of a
        # few float sums, not what trains
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-5, msg=name)


@pytest.mark.integration  # builds and runs a demo model: seconds
def test_a_faster_code_band_shortens_the_reach_without_losing_the_sink_on_long_text(lookup_tokenizer):
    """Untrained circuits, readout 32 nats, 12k tokens of held-out text without a BOS. A short reach set by
    rope_theta 1e4 loses the first position's sink as its pair turns (0.86 of its score at 4k tokens, none
    left near 11.8k): past 8k tokens the copy votes > 16 nats for a wrong token at many positions (measured 15%).
    The same reach set by moving the codes 6 pairs faster at rope_theta 1e6 keeps the sink (measured 0.2%), and
    both copy at 64 tokens and not at 1024."""
    stream = pydoc_stream(lookup_tokenizer)
    ids = torch.as_tensor(stream[30_000 : 30_000 + 12_288])[None]
    found = {}
    for name, knob in {
        "rope_theta 1e4": {"rope_theta": 1e4},
        "band": {"rope_theta": 1e6, "code_band_offset": 6},
    }.items():
        r = lookup_recipe(readout=32.0, max_position_embeddings=32_768, **knob)
        model, _ = build_model(lookup_tokenizer, r)
        ro = readout_logits(model, r, ids)[8192:-1]
        wrong = ((ro.max(1).values > 16) & (ro.argmax(1) != ids[0, 8193:])).float().mean().item()
        copies = {
            length: float(forgetting_curve_hits(model, lookup_tokenizer, stream, length, 2).mean())
            for length in (64, 1024)
        }
        found[name] = (wrong, copies)
    assert found["rope_theta 1e4"][0] > 0.05 and found["band"][0] < 0.02, found
    for _, copies in found.values():
        assert copies[64] > 0.9 and copies[1024] < 0.2, found


def test_known_answer_variants_differ_only_in_the_reach_knob_of_their_recipe(monkeypatch):
    """The first model's variants turn rope_theta; a recipe with a first-position sink (the lookup recipe) turns
    the code band at rope_theta 1e6 (that sink turns with rope_theta), with or without the lookup. Either way long
    and short differ in that knob alone, and the labels name it."""
    from dataclasses import asdict

    from lm_eval_longctx.demo import known_answer

    def differing(base, variants):
        long, short = (asdict(Recipe(**{**base, **variants[v]})) for v in ("long", "short"))
        return {k for k in long if long[k] != short[k]}

    assert variants_for(COPY_ONLY_RECIPE) is ROPE_THETA_VARIANTS
    assert differing(COPY_ONLY_RECIPE, ROPE_THETA_VARIANTS) == {"rope_theta"}
    lookup_variants = variants_for(LOOKUP_RECIPE)
    assert lookup_variants is CODE_BAND_VARIANTS
    assert differing(LOOKUP_RECIPE, lookup_variants) == {"code_band_offset"}
    assert VARIANTS is variants_for(DEMO_RECIPE)
    assert variants_for({**LOOKUP_RECIPE, "lookup": False}) is CODE_BAND_VARIANTS
    assert variants_for({**LOOKUP_RECIPE, "first_sink": False}) is ROPE_THETA_VARIANTS
    assert all(Recipe(**{**LOOKUP_RECIPE, **o}).rope_theta == 1e6 for o in lookup_variants.values())
    monkeypatch.setattr("lm_eval_longctx.demo.model.DEMO_RECIPE", LOOKUP_RECIPE)
    monkeypatch.setattr("lm_eval_longctx.demo.model.VARIANTS", lookup_variants)
    assert known_answer.variant_labels(["long", "short", "none"]) == {
        "long": "long (rope_theta 1e6)",
        "short": "short (rope_theta 1e6, code band +6)",
        "none": "none (no copy circuit)",
    }
