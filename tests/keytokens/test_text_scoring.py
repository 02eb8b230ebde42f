"""One text's scoring request (``keytokens/text_scoring.py``): it round-trips through its spec, a plain dict, and
refuses half a window setting."""

import json

import pytest

from lm_eval_longctx.keytokens import text_scoring


@pytest.mark.integration
def test_a_text_request_round_trips_through_its_spec_and_refuses_half_a_window_setting():
    request = text_scoring.TextRequest(
        add_special_tokens=True, offsets=True, trunc_len=64, stride=16, window_batch_size=2, long_pass="full"
    )
    spec = request.to_spec()
    assert spec["kind"] == "sequence" and text_scoring.TextRequest.from_spec(spec) == request
    assert json.loads(json.dumps(spec)) == spec  # a plain dict: what lm-eval's cache key hashes
    with pytest.raises(ValueError, match="both trunc_len and stride"):
        text_scoring.TextRequest(trunc_len=64)
    with pytest.raises(ValueError, match="long_pass must be one of"):
        text_scoring.TextRequest(long_pass="fast")
