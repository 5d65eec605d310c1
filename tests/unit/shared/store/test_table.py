"""lambdas.shared.store.table: the helpers every conditional write goes through, on moto."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.round_trips import RoundTrips
from lambdas.shared import cursor as cursors
from lambdas.shared import keys
from lambdas.shared.errors import Conflict
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.expressions import Expr, Update
from lambdas.shared.store.table import (
    Cancelled,
    ConditionFailed,
    Refused,
    TableCore,
    Transaction,
    read_modify_write,
)

KEY = keys.key("THING#1", "META")


def counter(table: TableCore, value: int) -> None:
    """The item at KEY holds ``n = value``."""
    item = {"PK": {"S": "THING#1"}, "SK": {"S": "META"}, "n": {"N": str(value)}}
    table.client.put_item(TableName=table.table_name, Item=item)


def bump(expected: int) -> tuple[Update, str]:
    update = Update(Expr())
    update.set("n", expected + 1)
    return update, f"{update.expr.n('n')} = {update.expr.v(expected)}"


def test_update_if_returns_the_item_it_wrote(store: DynamoSessionStore) -> None:
    counter(store.table, 1)
    update, condition = bump(1)
    assert store.table.update_if(KEY, update, condition)["n"] == 2


def test_a_refused_update_hands_back_the_item_as_it_was(store: DynamoSessionStore) -> None:
    counter(store.table, 5)
    update, condition = bump(1)
    with RoundTrips(store.table.client) as trips, pytest.raises(ConditionFailed) as refused:
        store.table.update_if(KEY, update, condition)
    assert refused.value.old is not None
    assert refused.value.old["n"] == 5
    assert not refused.value.missing
    assert trips.operations() == ["UpdateItem"]  # the old item came with the refusal, not from a read


def test_updated_if_answers_whether_the_condition_held_and_writes_only_then(store: DynamoSessionStore) -> None:
    counter(store.table, 1)
    assert store.table.updated_if(KEY, *bump(1)) is True
    assert store.table.get(KEY)["n"] == 2
    with RoundTrips(store.table.client) as trips:
        assert store.table.updated_if(KEY, *bump(1)) is False
    assert store.table.get(KEY)["n"] == 2
    assert trips.operations() == ["UpdateItem"]


def test_update_tells_a_missing_item_from_a_changed_one(store: DynamoSessionStore) -> None:
    def run() -> Any:
        update, condition = bump(1)
        return store.table.update(
            KEY,
            update,
            f"attribute_exists({update.expr.n('PK')}) AND {condition}",
            missing=lambda: LookupError("missing"),
            changed=lambda old: Conflict(f"changed to {old['n']}"),
        )

    with pytest.raises(LookupError, match="missing"):
        run()
    counter(store.table, 7)
    with pytest.raises(Conflict, match="changed to 7"):
        run()


def test_put_new_never_overwrites_and_hands_back_what_is_there(store: DynamoSessionStore) -> None:
    store.table.put_new({**KEY, "n": 1})
    with pytest.raises(ConditionFailed) as refused:
        store.table.put_new({**KEY, "n": 2})
    assert refused.value.old == {**KEY, "n": 1}


def test_a_cancelled_transaction_names_the_actions_whose_condition_failed(store: DynamoSessionStore) -> None:
    # Given one existing item and one absent
    counter(store.table, 1)
    store.table.put_new(keys.key("THING#3", "META"))
    tx = Transaction(store.table.table_name)
    update, condition = bump(1)
    tx.update("thing", KEY, update, condition=condition)  # holds
    tx.put_new("other", keys.key("THING#2", "META"))  # holds
    tx.put_new("taken", keys.key("THING#3", "META"))  # fails: the key exists
    # When it is committed / Then the cancellation names only the failed action, by name
    with pytest.raises(Cancelled) as cancelled:
        store.table.commit(tx)
    assert cancelled.value.failed == frozenset({"taken"})
    assert isinstance(cancelled.value, Refused)
    assert store.table.get(keys.key("THING#2", "META")) is None  # nothing of it was written


def test_a_transaction_of_one_put_is_one_put_item(store: DynamoSessionStore) -> None:
    tx = Transaction(store.table.table_name)
    tx.put_new("only", {**KEY, "n": 1})
    with RoundTrips(store.table.client) as trips:
        store.table.commit(tx)
    assert trips.operations() == ["PutItem"]
    tx = Transaction(store.table.table_name)
    tx.put_new("only", {**KEY, "n": 2})
    with pytest.raises(Cancelled) as cancelled:
        store.table.commit(tx)
    assert cancelled.value.failed == frozenset({"only"})


def test_fails_on_two_actions_of_one_name(store: DynamoSessionStore) -> None:
    tx = Transaction(store.table.table_name)
    tx.delete("item", KEY)
    with pytest.raises(ValueError, match="'item' is there already"):
        tx.delete("item", keys.key("THING#2", "META"))


def test_read_modify_write_reads_again_after_a_refusal_and_gives_up_after_its_bound() -> None:
    attempts: list[int] = []

    def attempt() -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ConditionFailed(None)
        return "written"

    assert read_modify_write(3, attempt, exhausted=lambda: Conflict("gave up")) == "written"
    attempts.clear()

    def always_refused() -> str:
        attempts.append(len(attempts))
        raise Cancelled(frozenset(), None)  # type: ignore[arg-type]

    with pytest.raises(Conflict, match="gave up"):
        read_modify_write(4, always_refused, exhausted=lambda: Conflict("gave up"))
    assert len(attempts) == 4


def test_read_modify_write_never_repeats_an_attempt_that_raised_its_own_error() -> None:
    attempts: list[int] = []

    def attempt() -> str:
        attempts.append(1)
        raise Conflict("the record is closed")

    with pytest.raises(Conflict, match="closed"):
        read_modify_write(5, attempt, exhausted=lambda: Conflict("gave up"))
    assert attempts == [1]


def test_latest_is_the_sessions_last_item_under_the_prefix_in_one_read(store: DynamoSessionStore) -> None:
    def put(session_id: str, sort_key: str) -> None:
        item = {"PK": {"S": keys.session_pk(session_id)}, "SK": {"S": sort_key}, "n": {"S": sort_key}}
        store.table.client.put_item(TableName=store.table.table_name, Item=item)

    assert store.table.latest("s1", "SUMMARY#") is None
    for sort_key in ("SUMMARY#0002", "SUMMARY#0001", "SUMMARY#0003", "TURN#0009"):
        put("s1", sort_key)
    put("s2", "SUMMARY#0004")  # another session's, later

    queries: list[dict[str, Any]] = []
    store.table.client.meta.events.register(
        "before-parameter-build.dynamodb.*", lambda params, **_: queries.append(params)
    )
    latest = store.table.latest("s1", "SUMMARY#")

    assert latest is not None
    assert latest["n"] == "SUMMARY#0003"
    assert [q["Limit"] for q in queries] == [1]  # one request for one item, however many the session holds
    assert store.table.latest("s3", "SUMMARY#") is None


def _things(table: TableCore, count: int) -> None:
    for n in range(1, count + 1):
        item = {"PK": {"S": "THING#p"}, "SK": {"S": f"N#{n}"}}
        table.client.put_item(TableName=table.table_name, Item=item)


def _page(table: TableCore, limit: int, start: dict[str, Any] | None = None) -> tuple[list[str], str | None]:
    params = {"KeyConditionExpression": "PK = :p", "ExpressionAttributeValues": {":p": {"S": "THING#p"}}}
    items, cursor = table.query_page(params, limit=limit, scope="things", key_attributes=("PK", "SK"), start=start)
    return [str(i["SK"]) for i in items], cursor


def test_a_page_reads_one_item_more_than_it_gives_and_only_a_page_with_more_after_it_has_a_cursor(
    store: DynamoSessionStore,
) -> None:
    _things(store.table, 4)
    limits: list[int] = []
    store.table.client.meta.events.register(
        "before-parameter-build.dynamodb.Query", lambda params, **_: limits.append(params["Limit"])
    )
    first, cursor = _page(store.table, 2)
    assert (first, cursor) == (["N#1", "N#2"], cursors.encode("things", {"PK": "THING#p", "SK": "N#2"}))
    # The last page is full: the extra item asked for is not there, so no cursor (and no empty page)
    assert _page(store.table, 2, {"PK": "THING#p", "SK": "N#2"}) == (["N#3", "N#4"], None)
    assert _page(store.table, 3, {"PK": "THING#p", "SK": "N#2"}) == (["N#3", "N#4"], None)
    assert limits == [3, 3, 4]


def test_a_page_the_table_cut_short_continues_where_the_table_stopped(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a table that stops after one item (its 1 MB page limit), saying where
    _things(store.table, 3)
    real = store.table.client.query

    def cut_short(**params: Any) -> dict[str, Any]:
        answer = real(**params)
        first = answer["Items"][:1]
        return {**answer, "Items": first, "LastEvaluatedKey": {"PK": first[0]["PK"], "SK": first[0]["SK"]}}

    monkeypatch.setattr(store.table.client, "query", cut_short)
    # Then the short page carries a cursor at the table's stopping point
    assert _page(store.table, 2) == (["N#1"], cursors.encode("things", {"PK": "THING#p", "SK": "N#1"}))


@pytest.mark.parametrize(
    ("option", "value"),
    [("ttl_hours", 0), ("cleanup_shards", 0), ("max_batch_retries", 10), ("ttl_hours", True)],
)
def test_fails_on_an_option_out_of_bounds(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=option):
        TableCore("t", **{option: value})


def test_fails_without_a_table_name() -> None:
    with pytest.raises(ValueError, match="table_name"):
        TableCore("")
