"""lambdas.shared.pseudonyms: a customer's pseudonym is stable under one key, differs under another, hides the id."""

from __future__ import annotations

import hashlib
import hmac

import boto3
import pytest
from moto import mock_aws

from lambdas.shared.env import MissingSetting
from lambdas.shared.pseudonyms import Pseudonymiser, from_secret

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
CUSTOMER = "3f2a9c1e-7b1d-4f7e-9a51-0c6f2b8d4e11"


def test_a_customers_pseudonym_is_the_same_every_time_under_one_key() -> None:
    assert Pseudonymiser(KEY)(CUSTOMER) == Pseudonymiser(KEY)(CUSTOMER)
    assert Pseudonymiser(KEY)(CUSTOMER) != Pseudonymiser(KEY)(CUSTOMER + "x")


def test_another_key_gives_another_pseudonym() -> None:
    assert Pseudonymiser(KEY)(CUSTOMER) != Pseudonymiser(OTHER_KEY)(CUSTOMER)


def test_the_pseudonym_is_hmac_sha256_and_holds_no_part_of_the_id() -> None:
    pseudonym = Pseudonymiser(KEY)(CUSTOMER)

    assert pseudonym == hmac.new(KEY, CUSTOMER.encode(), hashlib.sha256).hexdigest()
    assert len(pseudonym) == 64
    assert all(part not in pseudonym for part in CUSTOMER.split("-"))
    # nor is it the plain digest anybody could compute from the id without the key
    assert pseudonym != hashlib.sha256(CUSTOMER.encode()).hexdigest()


def test_fails_on_a_key_shorter_than_32_bytes() -> None:
    with pytest.raises(ValueError, match=r"at least 32 bytes \(given 31\)"):
        Pseudonymiser(b"k" * 31)


def test_the_key_is_the_secrets_string_value() -> None:
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="us-east-1")
        arn = secrets.create_secret(Name="pseudonyms", SecretString="s" * 64)["ARN"]

        assert from_secret(secrets, arn)(CUSTOMER) == Pseudonymiser(b"s" * 64)(CUSTOMER)


def test_fails_naming_a_secret_without_a_string_value() -> None:
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="us-east-1")
        arn = secrets.create_secret(Name="pseudonyms", SecretBinary=b"\x00" * 64)["ARN"]

        with pytest.raises(MissingSetting, match=r"pseudonym secret \S*pseudonyms\S* holds no string value"):
            from_secret(secrets, arn)
