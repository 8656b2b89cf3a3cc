from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrapeflow.banking import KEYS_ENV, CredentialVault, VaultError
from scrapeflow.errors import ConfigError, MissingSetting

SECRET = "p4ss-w0rd-Ñ"


def test_encrypt_then_decrypt_gives_the_secret_back():
    vault = CredentialVault([CredentialVault.generate_key()])
    token = vault.encrypt(SECRET)
    assert SECRET.encode() not in token
    assert vault.decrypt(token) == SECRET


def test_rotation_re_encrypts_with_the_new_key_and_old_tokens_still_open():
    old, new = CredentialVault.generate_key(), CredentialVault.generate_key()
    token = CredentialVault([old]).encrypt(SECRET)
    both = CredentialVault([new, old])
    assert both.decrypt(token) == SECRET
    rotated = both.rotate(token)
    assert CredentialVault([new]).decrypt(rotated) == SECRET
    with pytest.raises(VaultError):
        CredentialVault([old]).decrypt(rotated)


def test_a_wrong_key_gives_a_clear_error_without_the_secret():
    token = CredentialVault([CredentialVault.generate_key()]).encrypt(SECRET)
    with pytest.raises(VaultError, match="key this vault does not hold") as info:
        CredentialVault([CredentialVault.generate_key()]).decrypt(token)
    assert SECRET not in str(info.value) and token.decode() not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_repr_shows_no_key():
    key = CredentialVault.generate_key()
    vault = CredentialVault([key, CredentialVault.generate_key()])
    assert key not in repr(vault) and repr(vault) == "CredentialVault(<2 keys>)"


def test_keys_from_the_environment_current_first(monkeypatch: pytest.MonkeyPatch):
    old, new = CredentialVault.generate_key(), CredentialVault.generate_key()
    token = CredentialVault([old]).encrypt(SECRET)
    monkeypatch.setenv(KEYS_ENV, f"{new}, {old}")
    vault = CredentialVault.from_env()
    assert vault.decrypt(token) == SECRET
    assert CredentialVault([new]).decrypt(vault.encrypt("x")) == "x"


def test_keys_from_a_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    key = CredentialVault.generate_key()
    path = tmp_path / "vault.keys"
    path.write_text(f"# current first\n{key}\n\n")
    path.chmod(0o600)
    monkeypatch.setenv("SCRAPEFLOW_VAULT_KEY_FILE", str(path))
    assert CredentialVault([key]).decrypt(CredentialVault.from_env().encrypt(SECRET)) == SECRET


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_a_key_file_open_to_others_is_refused_like_ssh_does(tmp_path: Path, mode: int):
    key = CredentialVault.generate_key()
    path = tmp_path / "vault.keys"
    path.write_text(f"{key}\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o}.*chmod 600") as info:
        CredentialVault.from_key_file(path)
    assert key not in str(info.value) and str(path) in str(info.value)
    path.chmod(0o400)  # read-only for its owner is fine
    assert CredentialVault.from_key_file(path).decrypt(CredentialVault([key]).encrypt("x")) == "x"


def test_a_key_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path):
    path = tmp_path / "vault.keys"
    os.mkfifo(path, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        CredentialVault.from_key_file(path)


def test_can_decrypt_checks_a_token_without_decrypting_it():
    old, new = CredentialVault.generate_key(), CredentialVault.generate_key()
    token = CredentialVault([old]).encrypt(SECRET)
    assert CredentialVault([new, old]).can_decrypt(token)
    assert not CredentialVault([new]).can_decrypt(token)
    assert not CredentialVault([old]).can_decrypt(b"not a token")


def test_no_key_anywhere_names_the_setting():
    with pytest.raises(MissingSetting, match=KEYS_ENV):
        CredentialVault.from_env({})


def test_a_malformed_key_is_refused_without_echoing_it():
    with pytest.raises(ConfigError, match="vault key #2 is not a Fernet key") as info:
        CredentialVault([CredentialVault.generate_key(), "not-a-real-key-hunter2"])
    assert "hunter2" not in str(info.value)
