"""The upload panel of the Run page (AppTest): a write never goes to an audit picked silently."""

from __future__ import annotations

from core.demo import DEMO_AUDIT_ID
from tests.apptest_helpers import app_on, open_page


def test_draws_upload_defaults_to_a_new_audit_and_never_picks_an_existing_one():
    at = open_page(app_on(DEMO_AUDIT_ID), "run")   # a bare URL makes the demo the active audit
    target = at.radio(key="import-target")
    assert target.value == "a new audit"
    assert at.text_input(key="import-new-id").value == ""
    assert at.text_input(key="import-criteria").label.startswith("Criteria maxima")
    target.set_value("an existing audit").run()
    assert not at.exception
    chosen = at.selectbox(key="import-existing")
    assert chosen.value is None                        # the demo is offered, never preselected
    assert DEMO_AUDIT_ID in chosen.options
    chosen.set_value(DEMO_AUDIT_ID).run()
    caption = " ".join(c.value for c in at.caption)
    assert "frozen criteria" in caption and "technical" in caption.replace("\\", "")
