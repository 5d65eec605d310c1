"""lambdas.shared.store.expressions: every name and value through a placeholder, updates built clause by clause."""

from __future__ import annotations

from lambdas.shared.store.expressions import Expr, Update


def test_names_and_values_are_placeholders_so_reserved_words_never_matter() -> None:
    expr = Expr()
    condition = f"{expr.n('status')} = {expr.v('active')} AND {expr.n('ttl')} < {expr.v(5)}"
    assert condition == "#status = :v0 AND #ttl < :v1"
    assert expr.params() == {
        "ExpressionAttributeNames": {"#status": "status", "#ttl": "ttl"},
        "ExpressionAttributeValues": {":v0": {"S": "active"}, ":v1": {"N": "5"}},
    }


def test_any_name_gets_its_own_key_placeholder() -> None:
    expr = Expr()
    assert [expr.key("conn=1"), expr.key("conn/2")] == ["#k0", "#k1"]
    assert expr.params()["ExpressionAttributeNames"] == {"#k0": "conn=1", "#k1": "conn/2"}


def test_an_expression_without_names_or_values_has_no_parameters() -> None:
    assert Expr().params() == {}


def test_an_update_sets_removes_and_adds_and_a_none_value_removes() -> None:
    update = Update(Expr())
    update.set("status", "active")
    update.set("connection_id", None)
    update.remove("cleanup_at")
    update.add("turn_count", 1)
    tat = update.expr.n("tat")
    update.set_clause(f"{tat} = {tat} + {update.expr.v(10)}")
    update.remove_path(f"{update.expr.n('live')}.{update.expr.key('c-1')}")
    assert update.expression() == (
        "SET #status = :v0, #tat = #tat + :v2 REMOVE #connection_id, #cleanup_at, #live.#k0 ADD #turn_count :v1"
    )
