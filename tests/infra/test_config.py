"""Stage configuration: cdk.json is validated into a frozen object with clear errors."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from embedded.synth import cdk_context
from stacks import project
from stacks.config import ConfigError, StageConfig, load_stage_config, with_overrides


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def test_dev_and_prod_load(stages: dict[str, Any]) -> None:
    dev = load_stage_config(stages, "dev")
    prod = load_stage_config(stages, "prod")
    assert (dev.removal_policy, dev.deletion_protection, dev.log_execution_data) == ("destroy", False, True)
    assert (prod.removal_policy, prod.deletion_protection, prod.log_execution_data) == ("retain", True, False)
    assert prod.log_retention_days > dev.log_retention_days
    assert "*" not in prod.cors_allowed_origins
    assert prod.waf_enabled
    assert prod.alarm_email


def test_config_is_frozen(stages: dict[str, Any]) -> None:
    config = load_stage_config(stages, "dev")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"  # type: ignore[misc]


def test_fails_on_unknown_stage(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"unknown stage 'qa': cdk.json defines \['dev', 'prod'\]"):
        load_stage_config(stages, "qa")


def test_readers_outside_an_app_get_the_stage_the_app_builds_and_its_refusals(stages: dict[str, Any]) -> None:
    # The tools, the benchmarks and the embedded stage read cdk.json through stacks.project
    assert project.stage_config("prod") == load_stage_config(stages, "prod")
    with pytest.raises(ConfigError, match=r"unknown stage 'qa': cdk.json defines \['dev', 'prod'\]"):
        project.stage_config("qa")


def test_fails_on_unknown_key(stages: dict[str, Any]) -> None:
    bad = {**stages, "dev": {**stages["dev"], "log_retension_days": 7}}
    with pytest.raises(ConfigError, match=r"stage 'dev': unknown keys \['log_retension_days'\]"):
        load_stage_config(bad, "dev")


@pytest.mark.parametrize(
    ("guardrail", "message"),
    [
        (
            {"bedrock_guardrail_id": "Not An Id", "bedrock_guardrail_version": "1"},
            r"bedrock_guardrail_id must be a guardrail id",
        ),
        (
            {"bedrock_guardrail_id": "gr0abc123", "bedrock_guardrail_version": "latest"},
            r"bedrock_guardrail_version must be a version number such as '1', or 'DRAFT' \(given 'latest'\)",
        ),
        ({"bedrock_guardrail_id": "gr0abc123", "bedrock_guardrail_version": "0"}, r"bedrock_guardrail_version must be"),
        (
            {"bedrock_guardrail_id": "gr0abc123", "bedrock_guardrail_version": "1", "bedrock_model_id": None},
            r"bedrock_guardrail_id needs bedrock_model_id",
        ),
    ],
)
def test_fails_on_a_guardrail_that_cannot_screen_replies(
    stages: dict[str, Any], guardrail: dict[str, Any], message: str
) -> None:
    bad = {**stages, "dev": {**stages["dev"], **guardrail}}
    with pytest.raises(ConfigError, match=rf"stage 'dev': {message}"):
        load_stage_config(bad, "dev")


def test_a_guardrail_may_be_named_by_id_or_arn(stages: dict[str, Any]) -> None:
    for guardrail_id in ("gr0abc123", "arn:aws:bedrock:eu-west-1:123456789012:guardrail/gr0abc123"):
        config = load_stage_config(
            {
                **stages,
                "dev": {
                    **stages["dev"],
                    "guardrail": {"create": False},  # the stage's own guardrail otherwise
                    "bedrock_guardrail_id": guardrail_id,
                    "bedrock_guardrail_version": "DRAFT",
                },
            },
            "dev",
        )
        assert (config.bedrock_guardrail_id, config.bedrock_guardrail_version) == (guardrail_id, "DRAFT")
    assert load_stage_config(stages, "prod").bedrock_guardrail_id is None  # the default: its own guardrail


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log_retention_days", 10, r"log_retention_days must be one of \[1, 3, 5"),
        ("removal_policy", "keep", r"removal_policy must be 'destroy' or 'retain' \(given 'keep'\)"),
        ("map_max_concurrency", 0, r"map_max_concurrency must be a number in 1..40 \(given 0\)"),
        ("map_max_concurrency", True, r"map_max_concurrency must be a number"),
        ("capacity", {"concurrent_chats": "many"}, r"capacity\.concurrent_chats must be a number"),
        ("deletion_protection", "yes", r"deletion_protection must be true or false"),
        ("alarm_email", "not-an-address", r"alarm_email must be an e-mail address"),
        ("managers_email", "managers", r"managers_email must be an e-mail address"),
        ("cors_allowed_origins", [], r"cors_allowed_origins must list at least one origin"),
        ("cors_allowed_origins", "http://x", r"cors_allowed_origins must be a list of strings"),
        ("account", "123", r"account must be a 12-digit AWS account id"),
        ("audit_object_lock_mode", "strict", r"audit_object_lock_mode must be 'governance' or 'compliance'"),
        ("bedrock_model_id", " ", r"bedrock_model_id must be a Bedrock model id such as"),
        (
            "bedrock_model_id",
            "arn:aws:bedrock:eu-west-1::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0",
            r"bedrock_model_id must be a Bedrock model id .* prefix \(us\., eu\., apac\., jp\., au\.",
        ),
        ("bedrock_guardrail_id", "gr0abc123", r"bedrock_guardrail_id/_version must be given together"),
        ("bedrock_guardrail_version", "1", r"bedrock_guardrail_id/_version must be given together"),
        ("notice_sender", "notices", r"notice_sender must be an e-mail address"),
        ("notice_recipient_domains", "example.com", r"notice_recipient_domains must be a list of strings"),
        ("notice_recipient_domains", ["https://x.test"], r"notice_recipient_domains must hold domains"),
        ("notice_recipient_domains", [], r"notice_recipient_domains must list the domains a stage"),
        ("trail_query_scan_limit_mb", 5, r"trail_query_scan_limit_mb must be a number in 10..10485760 \(given 5\)"),
        ("trail_query_scan_limit_mb", "1GB", r"trail_query_scan_limit_mb must be a number in 10..10485760"),
        ("waf_ip_rate_limit", 5, r"waf_ip_rate_limit must be a number in 10..2000000000 \(given 5\)"),
        # dev's REST throttle is 20/s: 6,000 requests per five minutes, so one IP may have 600 of them
        ("waf_ip_rate_limit", 601, r"waf_ip_rate_limit must be at most a tenth of .* so at most 600 \(given 601\)"),
        ("export_review_min_score", 11, r"export_review_min_score must be a number in 0..10 \(given 11\)"),
        ("export_review_min_score", -1, r"export_review_min_score must be a number in 0..10 \(given -1\)"),
        ("export_review_min_score", "high", r"export_review_min_score must be a number in 0..10"),
        ("handoff_metric_reasons", "billing", r"handoff_metric_reasons must be a list of strings"),
        ("handoff_metric_reasons", ["Billing"], r"handoff_metric_reasons must be at most 20 handoff reasons"),
        ("handoff_metric_reasons", [f"r{n}" for n in range(21)], r"handoff_metric_reasons must be at most 20"),
        (
            "handoff_assignment_p90_alarm_seconds",
            0,
            r"handoff_assignment_p90_alarm_seconds must be a number in 1..86400",
        ),
    ],
)
def test_fails_on_bad_value(stages: dict[str, Any], key: str, value: Any, message: str) -> None:
    bad = {**stages, "dev": {**stages["dev"], key: value}}
    with pytest.raises(ConfigError, match=rf"stage 'dev': {message}"):
        load_stage_config(bad, "dev")


def test_one_ip_may_have_a_tenth_of_the_stage_in_each_waf_window(stages: dict[str, Any]) -> None:
    assert (
        load_stage_config({**stages, "dev": {**stages["dev"], "waf_ip_rate_limit": 600}}, "dev").waf_ip_rate_limit
        == 600
    )
    assert load_stage_config(stages, "prod").waf_ip_rate_limit == 1500


def test_both_stages_default_to_a_current_model_behind_the_global_inference_profile(stages: dict[str, Any]) -> None:
    model = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
    assert StageConfig(name="test").bedrock_model_id == model
    assert {load_stage_config(stages, name).bedrock_model_id for name in ("dev", "prod")} == {model}


@pytest.mark.parametrize(
    ("model_id", "message"),
    [
        (
            "anthropic.claude-3-haiku-20240307-v1:0",
            r"names Claude 3 Haiku, which reached its end of life on Amazon Bedrock on 2026-09-10 in most regions",
        ),
        ("us.anthropic.claude-3-haiku-20240307-v1:0", r"names Claude 3 Haiku, .* on 2026-09-10"),
        ("eu.anthropic.claude-3-5-haiku-20241022-v1:0", r"names Claude 3.5 Haiku, .* on 2026-06-19, so its calls fail"),
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", r"names Claude 3.7 Sonnet, .* on 2026-04-28"),
    ],
)
def test_fails_on_a_model_past_its_end_of_life_and_names_the_date_and_a_replacement(
    stages: dict[str, Any], model_id: str, message: str
) -> None:
    bad = {**stages, "prod": {**stages["prod"], "bedrock_model_id": model_id}}
    with pytest.raises(ConfigError, match=rf"stage 'prod': bedrock_model_id {message}") as raised:
        load_stage_config(bad, "prod")
    assert "use a current model such as 'global.anthropic.claude-haiku-4-5-20251001-v1:0'" in str(raised.value)
    assert f"(given '{model_id}')" in str(raised.value)


def test_a_model_may_be_named_by_id_or_behind_any_inference_profile_prefix(stages: dict[str, Any]) -> None:
    for model_id in (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "jp.anthropic.claude-haiku-4-5-20251001-v1:0",
        "au.anthropic.claude-haiku-4-5-20251001-v1:0",
        "us.anthropic.claude-sonnet-4-6",
        "amazon.nova-lite-v1:0",
    ):
        # (no fallback here: Sonnet 4.6 is dev's fallback, and a fallback must be another model)
        entry = {**stages["dev"], "bedrock_model_id": model_id, "model_resilience": {"fallback_model_id": None}}
        assert load_stage_config({**stages, "dev": entry}, "dev")
    echo = load_stage_config({**stages, "dev": {**stages["dev"], "bedrock_model_id": None}}, "dev")
    assert echo.bedrock_model_id is None


def test_fails_on_wildcard_cors_in_production(stages: dict[str, Any]) -> None:
    bad = {**stages, "prod": {**stages["prod"], "cors_allowed_origins": ["*"]}}
    with pytest.raises(ConfigError, match=r"must not be '\*' in a retained \(production\) stage"):
        load_stage_config(bad, "prod")


def test_fails_on_account_without_region(stages: dict[str, Any]) -> None:
    bad = {**stages, "dev": {**stages["dev"], "account": "123456789012"}}
    with pytest.raises(ConfigError, match="account/region must be given together"):
        load_stage_config(bad, "dev")


def test_fails_when_stages_block_is_missing() -> None:
    with pytest.raises(ConfigError, match="context 'stages' must be an object"):
        load_stage_config(None, "dev")


def test_overrides_are_validated_again() -> None:
    config = StageConfig(name="test")
    assert with_overrides(config, handoff_idle_seconds=2).handoff_idle_seconds == 2
    with pytest.raises(ConfigError, match=r"handoff_idle_seconds must be a number in 1\.\.86400"):
        with_overrides(config, handoff_idle_seconds=0)
    with pytest.raises(ConfigError, match=r"handoff_reply_idle_seconds must be a number in 1\.\.86400"):
        with_overrides(config, handoff_reply_idle_seconds=0)


def test_defaults_are_what_the_issues_specify() -> None:
    config = StageConfig(name="test")
    assert config.summary_interval == 10
    limits = config.capacity.limits  # a small team's target: batches of 100, filled for at most 5 s
    assert (limits.stream_batch_size, limits.stream_batching_window_seconds) == (100, 5)
    assert (config.handoff_agent_wait_seconds, config.handoff_idle_seconds) == (300, 120)
    assert config.handoff_reply_idle_seconds == 600
    assert config.cleanup_grace_seconds == 3600
    assert config.review_ttl_days == 7
    assert config.export_review_min_score == 0  # unless a stage says otherwise, every export needs a person


def test_dev_lets_exports_without_customer_records_through_and_prod_sends_every_export_to_a_person(
    stages: dict[str, Any],
) -> None:
    assert load_stage_config(stages, "dev").export_review_min_score == 2
    assert load_stage_config(stages, "prod").export_review_min_score == 0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("archive_prefix", "/sessions/", r"archive_prefix must be an S3 key prefix"),
        ("manager_skill", "lead manager", r"manager_skill must be 1-64 letters"),
        ("context_turns", 0, r"context_turns must be a number in 1\.\.100"),
        ("bedrock_attempts", 11, r"bedrock_attempts must be a number in 1\.\.10"),
    ],
)
def test_fails_on_a_bad_function_setting(stages: dict[str, Any], key: str, value: Any, message: str) -> None:
    raw = {**stages, "dev": {**stages["dev"], key: value}}
    with pytest.raises(ConfigError, match=rf"stage 'dev': {message}"):
        load_stage_config(raw, "dev")


# ------------------------------------------------------------------ identity

_OIDC = {
    "provider": "oidc",
    "issuer": "https://login.example.com/",
    "jwks_url": "https://login.example.com/.well-known/jwks.json",
    "audiences": ["web-app"],
    "role_claim": "roles",
}


def test_identity_is_cognito_by_default_and_an_oidc_issuer_loads(stages: dict[str, Any]) -> None:
    dev = load_stage_config(stages, "dev")
    assert (dev.identity.provider, dev.identity.self_sign_up, dev.identity.default_role) == (
        "cognito",
        True,
        "customer",
    )
    oidc = load_stage_config({**stages, "qa": {"identity": _OIDC}}, "qa").identity
    assert (oidc.provider, oidc.audiences, oidc.role_claim) == ("oidc", ("web-app",), "roles")


@pytest.mark.parametrize(
    ("identity", "message"),
    [
        ({"provider": "saml"}, r"identity.provider must be 'cognito' or 'oidc' \(given 'saml'\)"),
        ({"mfa": "sometimes"}, r"identity.mfa must be 'off', 'optional' or 'required'"),
        ({"threat_protection": "max"}, r"identity.threat_protection must be 'off', 'audit' or 'enforced'"),
        ({"password_min_length": 6}, r"identity.password_min_length must be a whole number in 8..99 \(given 6\)"),
        ({"token_validity_minutes": 2000}, r"identity.token_validity_minutes must be a whole number in 5..1440"),
        ({"self_sign_up": "yes"}, r"identity.self_sign_up must be true or false"),
        ({"default_role": "admin"}, r"identity.default_role must be 'customer' or null"),
        ({"algorithms": ["HS256"]}, r"identity.algorithms must list asymmetric algorithms .*\(given \['HS256'\]\)"),
        ({"algorithms": ["RS256", "none"]}, r"identity.algorithms must list asymmetric algorithms"),
        ({"role_claim": "a b"}, r"identity.role_claim must be a claim name"),
        ({"issuer": "https://login.example.com/"}, r"identity names the issuer only for provider 'oidc'"),
        ({**_OIDC, "issuer": "http://login.example.com/"}, r"identity.issuer must be an https:// URL"),
        ({**_OIDC, "jwks_url": None}, r"identity.jwks_url must be an https:// URL for provider 'oidc'"),
        ({**_OIDC, "audiences": []}, r"identity.audiences must list the client ids"),
        ({**_OIDC, "audiences": "web-app"}, r"identity.audiences must be a list of strings"),
        ({"pool": "x"}, r"unknown identity keys \['pool'\]; allowed keys are"),
        ("cognito", r"identity must be an object"),
    ],
)
def test_fails_on_a_bad_identity(stages: dict[str, Any], identity: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=r"stage '?qa'?:? .*" + message):
        load_stage_config({**stages, "qa": {"identity": identity}}, "qa")


def test_fails_on_a_resume_grace_longer_than_the_cleanup_grace(stages: dict[str, Any]) -> None:
    bad = {**stages, "dev": {**stages["dev"], "session_resume_grace_seconds": 3601}}
    with pytest.raises(ConfigError, match=r"stage 'dev': session_resume_grace_seconds must not exceed cleanup_grace"):
        load_stage_config(bad, "dev")


def test_sessions_are_resumable_for_an_hour_by_default_and_in_both_stages(stages: dict[str, Any]) -> None:
    assert StageConfig(name="qa").session_resume_grace_seconds == 3600
    for stage in ("dev", "prod"):
        assert load_stage_config(stages, stage).session_resume_grace_seconds == 3600
