"""KMS on moto with a symmetric key's unused key pair made only when read: keys still do their work."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.kms import models

from embedded.services.kms import OnFirstUse, key_pairs_on_use


@pytest.fixture
def kms() -> Iterator[Any]:
    with key_pairs_on_use(), mock_aws():
        yield boto3.client("kms", region_name="us-east-1")


def _stored(key_id: str) -> Any:
    return models.kms_backends["123456789012"]["us-east-1"].keys[key_id]


def test_a_symmetric_key_encrypts_and_decrypts_without_a_key_pair_made(kms: Any) -> None:
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]

    blob = kms.encrypt(KeyId=key_id, Plaintext=b"chat")["CiphertextBlob"]

    assert kms.decrypt(CiphertextBlob=blob)["Plaintext"] == b"chat"
    pair = _stored(key_id).private_key
    assert isinstance(pair, OnFirstUse)
    assert pair._made is None


def test_the_pair_is_made_when_first_read_and_kept() -> None:
    made: list[int] = []

    def make() -> str:
        made.append(1)
        return "a key"

    pair = OnFirstUse(make)
    copied = copy.deepcopy(pair)  # as a copy of the key would: nothing is made, nothing recurses

    assert made == []
    assert pair.upper() == "A KEY"
    assert pair.lower() == "a key"
    assert copied.upper() == "A KEY"
    assert made == [1, 1]


def test_an_asymmetric_key_still_signs_and_verifies(kms: Any) -> None:
    key_id = kms.create_key(KeySpec="RSA_2048", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]

    signature = kms.sign(KeyId=key_id, Message=b"m", SigningAlgorithm="RSASSA_PSS_SHA_256")["Signature"]

    verified = kms.verify(KeyId=key_id, Message=b"m", Signature=signature, SigningAlgorithm="RSASSA_PSS_SHA_256")
    assert verified["SignatureValid"] is True
    assert not isinstance(_stored(key_id).private_key, OnFirstUse)
