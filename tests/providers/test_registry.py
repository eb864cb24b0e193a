"""The explicit provider registry."""

from __future__ import annotations

import pytest

from app.providers import PROVIDERS, UnknownProviderError, get_provider
from app.providers.base import Provider
from app.providers.meta_messaging import MetaMessagingProvider
from app.providers.twilio import TwilioProvider
from app.providers.whatsapp import WhatsAppProvider


def test_whatsapp_is_registered_under_its_own_name() -> None:
    provider = get_provider("whatsapp")
    assert isinstance(provider, WhatsAppProvider)
    assert provider.name == "whatsapp"
    assert "whatsapp" in PROVIDERS
    assert PROVIDERS["whatsapp"] is provider


def test_every_registered_provider_is_keyed_by_its_name() -> None:
    for name, provider in PROVIDERS.items():
        assert provider.name == name


def test_an_unknown_name_is_a_clear_key_error() -> None:
    with pytest.raises(UnknownProviderError) as caught:
        get_provider("telegram")
    assert isinstance(caught.value, KeyError)
    known = ", ".join(sorted(PROVIDERS))
    assert str(caught.value) == f"unknown provider 'telegram' (known: {known})"


def test_the_whatsapp_module_satisfies_the_provider_interface() -> None:
    provider: Provider = WhatsAppProvider()  # checked by mypy too
    assert callable(provider.send) and callable(provider.parse_webhook)


def test_messenger_and_instagram_are_registered_as_one_module_told_apart_by_object() -> None:
    messenger, instagram = get_provider("messenger"), get_provider("instagram")
    assert isinstance(messenger, MetaMessagingProvider)
    assert isinstance(instagram, MetaMessagingProvider)
    assert (messenger.object_name, instagram.object_name) == ("page", "instagram")


def test_twilio_is_registered_under_its_own_name() -> None:
    provider: Provider = get_provider("twilio")  # checked by mypy too
    assert isinstance(provider, TwilioProvider) and provider.name == "twilio"
