"""The TOML audit config: the examples load, mistakes are named, keys are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import load_config, load_sample, parse_config, save_audit
from core.errors import InputError
from core.store import Store

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = """
[audit]
id = "a1"
req_id = "ENG-1"
[harness]
model = "m-2025-01-01"
side_effect_free = true
[[criteria]]
name = "skills"
max = 10
[screener]
kind = "simulated"
"""


def test_example_configs_load_and_build_their_screeners(monkeypatch):
    cfg = load_config(ROOT / "examples" / "audit.toml")
    assert cfg.audit_id == "eng-2291-sim" and cfg.options.runs == 15
    assert [c.name for c in cfg.criteria][:2] == ["technical_skills", "experience"]
    assert cfg.sheet.side_effect_free and not cfg.sheet.blockers()
    assert len(cfg.load_sample()) == 12
    monkeypatch.setenv("SCREENER_API_KEY", "sk-config-test-0000")
    oa = load_config(ROOT / "examples" / "audit-openai.toml")
    scr = oa.build_screener()
    assert scr.kind == "openai-chat" and "{rubric}" not in scr.render_prompt("x")
    assert oa.sheet.temperature == 0.1 and oa.prices.get(oa.sheet.model) is not None
    assert "sk-config-test" not in str(oa.settings())


def test_save_audit_stores_sheet_criteria_and_candidates():
    cfg = load_config(ROOT / "examples" / "audit.toml")
    s = Store(":memory:")
    save_audit(s, cfg)
    a = s.get_audit(cfg.audit_id)
    assert a["harness_hash"] == cfg.sheet.hash and a["settings"]["cutoff"] == 78
    assert a["settings"]["applications_per_req"] == 410
    assert len(s.get_criteria(cfg.audit_id)) == 4 and len(s.get_candidates(cfg.audit_id)) == 12
    s.close()


def test_a_key_written_in_the_config_is_refused():
    with pytest.raises(InputError, match="api_key_env"):
        parse_config(MINIMAL + 'api_key = "sk-123"\n')


def test_unknown_fields_are_named():
    with pytest.raises(InputError, match="concurency"):
        parse_config(MINIMAL + "[run]\nconcurency = 4\n")


def test_screener_model_must_be_the_frozen_model():
    with pytest.raises(InputError, match="frozen"):
        parse_config(MINIMAL + 'model = "other-model"\n')


def test_missing_audit_id_and_bad_sampling_are_named():
    with pytest.raises(InputError, match="id"):
        parse_config(MINIMAL.replace('id = "a1"', ""))
    with pytest.raises(InputError, match="sampling"):
        parse_config(MINIMAL.replace("side_effect_free = true",
                                     'side_effect_free = true\nsampling = "fixed"'))


def test_invalid_toml_is_an_input_error():
    with pytest.raises(InputError, match="TOML"):
        parse_config("[audit\nid=")


def test_sample_with_application_paths_and_row_errors(tmp_path):
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "c1.txt").write_text("resume one")
    (tmp_path / "s.csv").write_text("candidate_id,stratum,first_pass_score,application_path\n"
                                    "c1,band,71,apps/c1.txt\n")
    df = load_sample(tmp_path / "s.csv")
    assert df.loc[0, "application"] == "resume one" and df.loc[0, "first_pass_score"] == 71
    (tmp_path / "bad.csv").write_text("candidate_id,first_pass_score,application\n"
                                      "c1,70,a\nc2,seventy,b\n")
    with pytest.raises(InputError) as e:
        load_sample(tmp_path / "bad.csv")
    assert "row 2" in str(e.value) and "first_pass_score" in str(e.value)
    (tmp_path / "dup.csv").write_text("candidate_id,application\nc1,a\nc1,b\n")
    with pytest.raises(InputError, match="duplicate"):
        load_sample(tmp_path / "dup.csv")


# ---------------------------------------------------------------------------- issue 8 / 12
OPENAI = MINIMAL.replace('kind = "simulated"', 'kind = "openai-chat"\n'
                         'base_url = "http://127.0.0.1:9/v1"')


def test_the_answer_format_and_invalid_policy_are_frozen_in_the_sheet():
    a = parse_config(OPENAI)
    assert a.sheet.response_format == "json_schema" and a.sheet.max_tokens == 512
    assert a.sheet.answer_schema["properties"]["skills"] == {"type": "integer", "minimum": 0,
                                                             "maximum": 10}
    assert a.sheet.on_invalid == "recall" and a.options.on_invalid == "recall"
    b = parse_config(OPENAI + 'response_format = "json_object"\n')
    c = parse_config(OPENAI + "max_tokens = 256\n")
    d = parse_config(OPENAI + '[run]\non_invalid = "keep-as-failed"\n')
    hashes = {x.sheet.hash for x in (a, b, c, d)}
    assert len(hashes) == 4                             # each changes what is measured
    assert b.sheet.answer_schema is None


def test_the_older_out_of_range_clip_means_on_invalid_clip_and_contradictions_are_named():
    cfg = parse_config(MINIMAL + 'out_of_range = "clip"\n')
    assert cfg.options.on_invalid == "clip" and cfg.sheet.on_invalid == "clip"
    with pytest.raises(InputError, match="on_invalid"):
        parse_config(MINIMAL + 'out_of_range = "clip"\n[run]\non_invalid = "recall"\n')


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PATH"])
def test_a_config_naming_a_non_model_secret_is_refused_at_load(name):
    with pytest.raises(InputError, match="does not look like a model API key"):
        parse_config(OPENAI + f'api_key_env = "{name}"\n')


@pytest.mark.parametrize("field,value", [("concurrency", 10_000_000), ("runs", 1e9),
                                         ("max_application_bytes", -1)])
def test_absurd_run_sizes_are_refused_by_name(field, value):
    with pytest.raises(InputError, match=field):
        parse_config(MINIMAL + f"[run]\n{field} = {value}\n")


def _sample(tmp_path, path_value: str) -> Path:
    (tmp_path / "s.csv").write_text("candidate_id,application_path\nc1,ok.txt\n"
                                    f"c2,{path_value}\n")
    (tmp_path / "ok.txt").write_text("resume")
    return tmp_path / "s.csv"


@pytest.mark.parametrize("path_value", ["../../../../etc/passwd", "/etc/passwd",
                                        "apps/../../secret.txt"])
def test_application_paths_outside_the_sample_folder_are_refused(tmp_path, path_value):
    with pytest.raises(InputError) as e:
        load_sample(_sample(tmp_path, path_value))
    assert "row 2" in str(e.value) and "application_path" in str(e.value)
    assert "root:" not in str(e.value)


def test_a_symlink_out_of_the_folder_and_an_oversized_application_are_refused(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not for the screener")
    folder = tmp_path / "sample"
    folder.mkdir()
    (folder / "link.txt").symlink_to(outside)
    with pytest.raises(InputError, match="outside"):
        load_sample(_sample(folder, "link.txt"))
    (folder / "big.txt").write_text("x" * 2000)
    with pytest.raises(InputError, match="max_application_bytes"):
        load_sample(_sample(folder, "big.txt"), max_application_bytes=1000)


def test_a_prompt_template_outside_the_config_folder_is_refused(tmp_path):
    cfg = parse_config(OPENAI + 'prompt_template = "../prompt.txt"\n', base_dir=tmp_path)
    with pytest.raises(InputError, match="prompt_template"):
        cfg.build_screener()


@pytest.mark.parametrize("line", ["weight = nan", "weight = inf", "weight = -1",
                                  "weight = 5000", "max = 1e9"])
def test_a_non_finite_negative_or_absurd_weight_or_maximum_in_a_config_is_refused(line):
    """As an import's --criteria is (core.ingest): a NaN weight was stored in the freeze sheet
    and the report then counted the criterion as if its weight were 1."""
    field = line.split()[0]
    toml = MINIMAL.replace('max = 10\n', 'max = 10\n' + line + '\n') if field == "weight" \
        else MINIMAL.replace("max = 10", line)
    with pytest.raises(InputError, match=rf"criteria 'skills'.*{field}"):
        parse_config(toml)


def test_the_configs_criteria_bounds_are_the_imports():
    from core import config, ingest
    assert (config.MAX_POINTS_CAP, config.MAX_WEIGHT) == (ingest.MAX_POINTS_CAP,
                                                          ingest.MAX_WEIGHT)


@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1:99999/v1", "port outside 1–65535"),
    ("http://127.0.0.1:0/v1", "port outside 1–65535"),
    ("ftp://127.0.0.1/v1", "must be an http(s) URL"),
    ("http://[::1/v1", "is not a URL"),
    ("http://api.example.com/v1", "plain http://"),
])
def test_a_bad_screener_url_is_refused_by_the_config_naming_the_field(url, words):
    from core.screeners.safety import check_base_url
    with pytest.raises(InputError, match=re.escape(words)) as e:
        check_base_url(url)
    assert "base_url" in str(e.value)
    assert check_base_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"
