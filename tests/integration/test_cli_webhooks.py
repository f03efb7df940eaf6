"""`factgate tenants set --webhook-url` and `factgate tenants webhook-secret [--rotate]`: a tenant's default
webhook URL and the secret its webhooks are signed with (stored encrypted, printed only on request).

Run in-process with click's CliRunner against an embedded SQLite instance, like test_cli_tenants.py.
"""

# Fixtures come from test_cli_tenants (conftest.py is not ours), so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.fernet import Fernet

from checks.webhooks import secret_key
from cli.main import main
from tests.integration.test_cli_tenants import _stored, instance, runner  # noqa: F401 - fixtures

HOOK = "https://hooks.acme.example/factgate"


def test_a_default_webhook_url_is_set_shown_and_removed(runner: CliRunner, instance: Path) -> None:
    assert "webhook URL         none" in runner.invoke(main, ["tenants", "show", "acme"]).output
    changed = runner.invoke(main, ["tenants", "set", "acme", "--webhook-url", HOOK])
    assert changed.exit_code == 0, changed.output
    assert changed.output.rstrip().endswith("webhook")
    assert _stored(instance, "acme").webhook_url == HOOK
    assert f"webhook URL         {HOOK}" in runner.invoke(main, ["tenants", "show", "acme"]).output
    listed = runner.invoke(main, ["tenants", "list"]).output.splitlines()
    assert [line.endswith("webhook") for line in listed] == [True, False]  # acme, globex
    # Other settings leave it alone; `none` removes it.
    assert runner.invoke(main, ["tenants", "set", "acme", "--weight", "2"]).exit_code == 0
    assert _stored(instance, "acme").webhook_url == HOOK
    assert runner.invoke(main, ["tenants", "set", "acme", "--webhook-url", "none"]).exit_code == 0
    assert _stored(instance, "acme").webhook_url is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/x", "must be an http or https URL"),
        ("https://user:pw@example.com/", "must not carry a user name or password"),
        ("https://example.com/a b", "must not contain spaces"),
    ],
)
def test_a_bad_webhook_url_is_refused(runner: CliRunner, instance: Path, url: str, message: str) -> None:
    result = runner.invoke(main, ["tenants", "set", "acme", "--webhook-url", url])
    assert result.exit_code == 2 and f"--webhook-url {message}" in result.output, result.output
    assert _stored(instance, "acme").webhook_url is None


def test_the_webhook_secret_is_made_once_printed_on_request_rotated_and_stored_encrypted(
    runner: CliRunner, instance: Path
) -> None:
    assert "webhook secret      none yet" in runner.invoke(main, ["tenants", "show", "acme"]).output
    first = runner.invoke(main, ["tenants", "webhook-secret", "acme"])
    assert first.exit_code == 0, first.output
    secret = first.output.strip()
    assert secret.startswith("whsec_") and len(secret_key(secret)) == 32
    assert runner.invoke(main, ["tenants", "webhook-secret", "acme"]).output.strip() == secret
    stored = _stored(instance, "acme")
    assert stored.webhook_secret_encrypted and secret not in stored.webhook_secret_encrypted
    assert secret.removeprefix("whsec_") not in stored.webhook_secret_encrypted
    for command in (["tenants", "list"], ["tenants", "show", "acme"]):
        out = runner.invoke(main, command).output
        assert secret.removeprefix("whsec_") not in out
    assert "webhook secret      set " in runner.invoke(main, ["tenants", "show", "acme"]).output

    rotated = runner.invoke(main, ["tenants", "webhook-secret", "acme", "--rotate"])
    assert rotated.exit_code == 0 and "rotated" in rotated.output
    new = rotated.output.splitlines()[0].strip()
    assert new.startswith("whsec_") and new != secret
    assert runner.invoke(main, ["tenants", "webhook-secret", "acme"]).output.strip() == new
    # globex has none until asked.
    assert _stored(instance, "globex").webhook_secret_encrypted is None
    assert "no tenant 'nobody'" in runner.invoke(main, ["tenants", "webhook-secret", "nobody"]).output


def test_rotate_keys_re_encrypts_webhook_secrets_too(
    runner: CliRunner, instance: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("FACTGATE_ENCRYPTION_KEYS", old)
    secret = runner.invoke(main, ["tenants", "webhook-secret", "acme"]).output.strip()
    monkeypatch.setenv("FACTGATE_ENCRYPTION_KEYS", f"{new},{old}")
    rotated = runner.invoke(main, ["tenants", "rotate-keys"])
    assert rotated.exit_code == 0 and "re-encrypted 1" in rotated.output
    token = _stored(instance, "acme").webhook_secret_encrypted
    assert token is not None and Fernet(new.encode()).decrypt(token.encode()).decode() == secret
    monkeypatch.setenv("FACTGATE_ENCRYPTION_KEYS", new)
    assert runner.invoke(main, ["tenants", "webhook-secret", "acme"]).output.strip() == secret
