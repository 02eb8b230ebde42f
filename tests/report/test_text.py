"""Text put into the report tools' markdown and HTML (``report/text.py``): table cells, invisible characters, HTML
escapes and cuts."""

from lm_eval_longctx.report import text


def test_text_escapes():
    assert text.md_cell("a|b\nc") == "a\\|b\\\\nc"
    assert text.visible("x\u202ey") == "x\\u202ey"
    assert text.esc("<b>\u202e") == "&lt;b&gt;\\u202e"
    assert text.cut("abcdef", 4) == "abc…"
