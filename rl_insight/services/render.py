"""Fill the provisioning/ templates (string.Template syntax); YAML values are JSON-quoted."""

from __future__ import annotations

import json
import string
from typing import Any

import yaml

from ..errors import ConfigError
from .resources import data_path


def render_template(relative: str, values: dict[str, Any], *, quote: bool = True, check_yaml: bool = True) -> str:
    src = data_path(relative)
    filled = {k: (json.dumps(v) if quote else str(v)) for k, v in values.items()}
    try:
        text = string.Template(src.read_text()).substitute(filled)
        if check_yaml:
            yaml.safe_load(text)
    except (KeyError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"template {src} could not be rendered: {exc}") from None
    return text
