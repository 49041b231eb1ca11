"""Secrets out of run configs: which keys name a credential, and credentials inside values.

Stdlib only; used by the client when `init(config=...)` describes the run (client/runinfo.py) and again by
the server before anything is stored, so a client of another version (or none of ours) cannot store one.

* **Keys** are matched by words, not substrings: `hf_token`, `api-key`, `X-Api-Key`, `wandb.key`,
  `aws_access_key_id`, `passphrase`, `private-key` are secrets; `ppo_max_token_len_per_gpu`, `max_tokens`,
  `tokenizer`, `author`, `max_num_batched_tokens`, `pad_token` are not.
* **Values** are scanned for credentials whatever their key: passwords in URLs and DSNs, `password=` /
  `token=` pairs in connection strings and query strings, webhook URLs, bearer tokens, and the shapes of
  well-known tokens (Hugging Face, OpenAI, GitHub, Slack, AWS, JWT).
"""

from __future__ import annotations

import re

MASK = "***"

# a key is secret when one of its words is one of these
_ALWAYS = frozenset({"password", "passwd", "passphrase", "pwd", "secret", "secrets", "credential", "credentials",
                     "apikey", "privatekey", "accesskey", "secretkey", "authorization", "cookie", "cookies", "webhook",
                     "webhooks", "dsn", "sessionid", "bearer", "passcode", "sas", "accountkey", "sharedaccesskey"})
# ... or when its last word is one of these (`token` but not `max_token_len`)
_LAST = frozenset({"token", "auth", "pat", "signature", "sig", "pass"})
# ... except after these words: tokenizer settings and counts, not credentials
_NOT_AFTER_TOKEN = frozenset(
    {
        "pad",
        "eos",
        "bos",
        "unk",
        "sep",
        "cls",
        "mask",
        "max",
        "min",
        "num",
        "start",
        "end",
        "stop",
        "image",
        "video",
        "audio",
        "special",
        "think",
        "tool",
        "chat",
        "per",
        "first",
        "last",
    }
)
# `<word> key` pairs that name a credential: api key, private key, wandb key, aws access key id…
_KEY_QUALIFIERS = frozenset(
    {
        "api",
        "private",
        "secret",
        "access",
        "wandb",
        "openai",
        "hf",
        "huggingface",
        "aws",
        "auth",
        "signing",
        "encryption",
        "ssh",
        "client",
        "service",
        "account",
        "master",
        "license",
        "session",
        "deploy",
        "anthropic",
        "azure",
        "gcp",
        "google",
        "mlflow",
        "comet",
        "neptune",
        "github",
        "slack",
        "subscription",
        "storage",
        "x",
    }
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _words(text: str) -> list[str]:
    """`X-Api-Key` → [x, api, key]; `awsAccessKeyId` → [aws, access, key, id]; `HF_TOKEN` → [hf, token]."""
    return [w.lower() for w in _WORDS.findall(text)]


def secret_key(path: str) -> bool:
    """Whether a (dotted) config key names a secret. The last component decides; the one before it gives the
    context of a bare `key` (`wandb.key`)."""
    parts = [p for p in re.split(r"[.\[\]]", path) if p]
    if not parts:
        return False
    words = _words(parts[-1])
    context = _words(parts[-2])[-1:] if len(parts) > 1 else []
    if not words:
        return False
    if any(w in _ALWAYS for w in words):
        return True
    if words[-1] in _LAST and not (len(words) > 1 and words[-2] in _NOT_AFTER_TOKEN):
        return True
    if words[-1] in ("tokens",) and len(words) > 1 and words[-2] in ("access", "auth", "api", "refresh", "bearer"):
        return True
    if words[-2:] in (["session", "id"], ["sas", "url"]):
        return True
    seq = context + words
    return any(a in _KEY_QUALIFIERS and b in ("key", "keys") for a, b in zip(seq, seq[1:])) or words == ["key"] and \
        bool(context) and context[0] in _KEY_QUALIFIERS


# credentials inside values, whatever the key
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)([^@\s/'\"]+)(@)")
_SECRET_NAMES = (r"(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|account[_-]?key|"
                 r"shared[_-]?access[_-]?key|auth|sig|signature|sas|credentials?)")
# name=value and name: value, also as a command line's --name=value inside a string (the `-` before the name)
_PAIR = re.compile(
    r"(?i)((?:^|[\s;&?,\"'{(-])(?:[a-z0-9]+[_-])*" + _SECRET_NAMES + r"\s*[=:]\s*[\"']?)([^\s;&,\"'}]+)"
)
# a command line inside a string: --name value
_FLAG_VALUE = re.compile(r"(?i)((?:^|\s)--?(?:[a-z0-9]+[_-])*" + _SECRET_NAMES + r"\s+)([^\s-][^\s]*)")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+([a-z0-9._~+/=-]{12,})")
_WEBHOOK = re.compile(r"(?i)\bhttps?://[^\s'\"]*(?:hooks?\.|webhook|/services/|/api/webhooks/)[^\s'\"]*")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|glpat-[A-Za-z0-9_-]{20,})")


def redact_value(text: str) -> str:
    """`text` with every credential found in it replaced by ***."""
    if len(text) < 8:
        return text
    text = _WEBHOOK.sub(lambda m: m.group(0).split("//", 1)[0] + "//" + MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    text = _PAIR.sub(lambda m: m.group(1) + MASK, text)
    text = _FLAG_VALUE.sub(lambda m: m.group(1) + MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + " " + MASK, text)
    return _TOKEN_SHAPES.sub(MASK, text)


def redact_args(items: list[str]) -> list[str]:
    """A command line as a list: the value after `--token` and the value of `--api-key=…` are secrets."""
    out: list[str] = []
    hide_next = False
    for a in items:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if a.startswith("-") and "=" in a and secret_key(a.lstrip("-").split("=", 1)[0]):
            out.append(a.split("=", 1)[0] + "=" + MASK)
            continue
        if a.startswith("-") and secret_key(a.lstrip("-")):
            hide_next = True
        out.append(redact_value(a))
    return out


def redact_flat(config: dict[str, object]) -> tuple[dict[str, object], int]:
    """A flat config (dotted keys → scalars) with secret keys masked and credentials cut out of values; and how
    many were redacted. The server applies it to whatever a client sent."""
    out: dict[str, object] = {}
    n = 0
    names: dict[str, str] = {}  # `env.3.name` → its name, for the `env.3.value` beside it (k8s env lists)
    for k, v in config.items():
        if k.endswith(".name") and isinstance(v, str):
            names[k[:-5]] = v
    for k, v in config.items():
        owner = names.get(k[:-6]) if k.endswith(".value") else None
        if secret_key(k) or (owner is not None and secret_key(owner)):
            out[k] = MASK
            n += v != MASK
        elif isinstance(v, str):
            r = redact_value(v)
            n += r != v
            out[k] = r
        else:
            out[k] = v
    return out, n
