"""botocore's models are parsed once per process, while every session keeps its own state."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import boto3
import pytest
from botocore import hooks, loaders, useragent
from botocore.config import Config
from moto import mock_aws

from embedded import models


@pytest.fixture
def fresh() -> Iterator[None]:
    """The shared loaders emptied, and the suite's own installation put back afterwards."""
    was_installed = models.installed()
    models.uninstall()
    yield
    models.uninstall()
    if was_installed:
        models.install()


_real_load_file = loaders.JSONFileLoader.load_file


def _files_parsed(make_clients: int) -> int:
    """How many JSON files botocore parsed while ``make_clients`` mocks each made a client and a call."""
    with mock.patch.object(
        loaders.JSONFileLoader, "load_file", autospec=True, side_effect=_real_load_file
    ) as load_file:
        for _ in range(make_clients):
            with mock_aws():
                boto3.client("dynamodb", region_name="us-east-1").list_tables()
        return int(load_file.call_count)


def test_without_it_every_mock_parses_the_models_again(fresh: None) -> None:
    assert _files_parsed(3) >= 3 * _files_parsed(1) > 0


def test_with_it_a_second_mock_parses_nothing(fresh: None) -> None:
    models.install()
    first = _files_parsed(1)
    assert first > 0
    assert _files_parsed(3) == 0


def test_sessions_share_the_loader_and_nothing_else(fresh: None) -> None:
    models.install()
    one, two = boto3.session.Session(), boto3.session.Session()
    assert one._session.get_component("data_loader") is two._session.get_component("data_loader")
    assert one._session is not two._session
    client_one = one.client("dynamodb", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    client_two = two.client("dynamodb", region_name="eu-west-1", aws_access_key_id="c", aws_secret_access_key="d")
    assert client_one.meta.region_name == "us-east-1"
    assert client_two.meta.region_name == "eu-west-1"
    assert client_one._request_signer._credentials.access_key == "a"
    assert client_two._request_signer._credentials.access_key == "c"


def test_install_is_idempotent_and_uninstall_restores_a_loader_per_session(fresh: None) -> None:
    models.install()
    models.install()
    assert models.installed()
    models.uninstall()
    assert not models.installed()
    one, two = boto3.session.Session(), boto3.session.Session()
    assert one._session.get_component("data_loader") is not two._session.get_component("data_loader")


_EVENT_NAMES = (
    "before-call.dynamodb.GetItem",
    "before-call.apigateway.GetRestApi",  # an alias: apigateway -> api-gateway
    "needs-retry.autoscaling.DescribeTags",  # autoscaling -> auto-scaling
    "after-call.autoscaling-plans.CreateScalingPlan",  # a dashed name, not autoscaling's
    "request-created.api.sagemaker.ListModels",  # a dotted alias: api.sagemaker -> sagemaker
    "provide-client-params.s3",
)


def _aliased_by_botocore(name: str, aliases: dict[str, str] | None = None) -> str:
    """What botocore's own aliaser answers, on an emitter of its own."""
    emitter = hooks.EventAliaser(hooks.HierarchicalEmitter(), aliases)
    with mock.patch.object(hooks.EventAliaser, "_alias_event_name", models.original_alias_event_name()):
        return str(emitter._alias_event_name(name))


def test_every_client_gets_botocore_own_event_names_worked_out_once(fresh: None) -> None:
    expected = {name: _aliased_by_botocore(name) for name in _EVENT_NAMES}
    assert expected["before-call.apigateway.GetRestApi"] == "before-call.api-gateway.GetRestApi"
    models.install()
    clients = [boto3.session.Session().client("dynamodb", region_name="us-east-1") for _ in range(2)]
    worked_out = mock.Mock(side_effect=models.original_alias_event_name())
    with mock.patch.object(models, "_original", [models._original[0], worked_out]):
        for client in clients:
            assert {name: client.meta.events._alias_event_name(name) for name in _EVENT_NAMES} == expected
    assert worked_out.call_count <= len(_EVENT_NAMES)  # the second client's names were all kept


def test_an_emitter_with_aliases_of_its_own_keeps_them(fresh: None) -> None:
    models.install()
    client = boto3.session.Session().client("dynamodb", region_name="us-east-1")
    assert client.meta.events._alias_event_name("before-call.dynamodb.GetItem") == "before-call.dynamodb.GetItem"
    own = hooks.EventAliaser(hooks.HierarchicalEmitter(), {"dynamodb": "table-store"})
    assert own._alias_event_name("before-call.dynamodb.GetItem") == "before-call.table-store.GetItem"
    assert _aliased_by_botocore("before-call.dynamodb.GetItem", {"dynamodb": "table-store"}) == (
        "before-call.table-store.GetItem"
    )


def _user_agent_with_app_id(app_id: str) -> str:
    """The User-Agent header a DynamoDB call sends with ``app_id`` configured."""
    sent: list[str] = []
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", config=Config(user_agent_appid=app_id))
        client.meta.events.register("before-send", lambda request, **_: sent.append(request.headers["User-Agent"]))
        client.list_tables()
    return sent[0].decode() if isinstance(sent[0], bytes) else sent[0]


def test_user_agent_parts_are_sanitized_as_botocore_does_once_per_text(fresh: None) -> None:
    raw = "manga assist/é#1"
    expected = {
        allow_hash: useragent.sanitize_user_agent_string_component(raw, allow_hash) for allow_hash in (True, False)
    }
    assert expected == {True: "manga-assist--#1", False: "manga-assist---1"}
    header = _user_agent_with_app_id(raw)
    models.install()
    kept = useragent.sanitize_user_agent_string_component
    assert {allow_hash: kept(raw, allow_hash) for allow_hash in (True, False)} == expected
    assert _user_agent_with_app_id(raw).split(" app/")[1] == header.split(" app/")[1]
    assert kept.cache_info().hits > 0
