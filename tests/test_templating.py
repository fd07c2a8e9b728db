"""The report templates' environments: a missing key fails loudly, every target escapes user
text its own way, and the slider path never loads Jinja2."""

from __future__ import annotations

import subprocess
import sys

import jinja2
import pytest

from core.report import report_dict
from core.templating import render_template
from tests.support import long_frame


def _dict(candidate: str) -> dict:
    from core.audit import Settings, analyze_frames

    res = analyze_frames(long_frame({candidate: {"skill": [1, 2, 3, 4]},
                                     "b": {"skill": [2, 3, 4, 5]}}),
                         settings=Settings(cutoff=3))
    return report_dict(res)


def test_a_report_dict_missing_a_key_fails_instead_of_printing_nothing():
    d = _dict("a")
    del d["scope"]
    for target in ("text", "md"):
        with pytest.raises(jinja2.UndefinedError, match="scope"):
            render_template(f"audit_{target}.j2", target, d=d, invalid=None)


def test_every_target_escapes_user_text_its_own_way():
    evil = "<i>x</i>|\x1b[31mred\nFORGED LINE"
    d = _dict(evil)
    text = render_template("audit_text.j2", "text", d=d, invalid=None)
    assert "\x1b" not in text and "\\x1b[31mred\\nFORGED LINE" in text
    assert not any(line.startswith("FORGED") for line in text.splitlines())
    md = render_template("audit_md.j2", "md", d=d, invalid=None)
    assert "<i>" not in md and "\\<i\\>x\\</i\\>\\|" in md and "\x1b" not in md
    page = render_template("audit_html.j2", "html", d=d, text=text, title="t", charts=[])
    assert "<i>" not in page and "&lt;i&gt;x&lt;/i&gt;" in page


def test_an_unknown_target_is_refused_by_name():
    with pytest.raises(ValueError, match="target must be one of text, md, html"):
        render_template("audit_text.j2", "pdf", d={})


def test_the_slider_path_does_not_load_jinja2():
    code = ("import sys, core.live, core.band, core.flip, core.criteria; "
            "print('jinja2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
