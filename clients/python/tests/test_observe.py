"""The outcome counts and their log records (contract.json `outcomes`)."""

import logging

import pytest

from pg_idem_http import CONTRACT, Route, outcome_counts
from pg_idem_http.observe import record


def test_every_outcome_of_the_contract_is_counted_and_no_other():
    before = outcome_counts()
    assert list(before) == CONTRACT["outcomes"]
    for name in CONTRACT["outcomes"]:
        record(name)
    assert outcome_counts() == {name: count + 1 for name, count in before.items()}
    with pytest.raises(ValueError):
        record("completed")  # pg_idem's word, not an outcome of the contract


@pytest.mark.parametrize("name,level", [
    ("transaction_ended", logging.ERROR), ("database_error", logging.ERROR),
    ("stored", logging.DEBUG), ("rejected", logging.DEBUG),
])
def test_outcomes_are_logged_on_the_package_logger(caplog, name, level):
    with caplog.at_level(logging.DEBUG, logger="pg_idem_http"):
        record(name, Route("POST", "/orders/{id}/pay"), status=201)
    (rec,) = [r for r in caplog.records if r.name == "pg_idem_http"]
    assert rec.levelno == level
    assert rec.getMessage() == f"pg_idem {name}: POST /orders/{{id}}/pay status=201"
