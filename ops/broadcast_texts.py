"""The team's named broadcast texts, `team/broadcasts.json` (`ops broadcast create --template NAME`).

    {"version": 1, "fallback_language": "en",
     "broadcasts": {"summer_sale": {"en": "Our sale starts today!", "de": "Heute beginnt ..."}}}

Each recipient gets the text of its language as the store knows it (its latest update's Telegram
`language_code`: "de-at" takes a "de-at" text, else "de"), else the fallback language's text. A
template without a fallback text, an unknown name, or a text Telegram would refuse is refused
before anything is written, naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline import broadcast as jobs
from pipeline.team import team_file

TEMPLATES_FILE_NAME = "broadcasts.json"
TEMPLATES_FILE_VERSION = 1


class TemplateError(ValueError):
    """A template that cannot be sent as asked (the message says why, naming the file)."""


@dataclass(frozen=True)
class Template:
    name: str
    fallback: str  # the language whose text a chat of any other language gets
    texts: dict[str, str]  # language (lower case) -> text

    def language_for(self, language: str | None) -> str:
        """The key of `texts` a chat of `language` gets."""
        if language:
            wanted = language.lower()
            for candidate in (wanted, wanted.split("-", 1)[0]):
                if candidate in self.texts:
                    return candidate
        return self.fallback


def parse(text: str, name: str, where: str) -> Template:
    """Template `name` of a broadcasts.json's `text` (`where` names the file in errors)."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise TemplateError(f"{where} is not valid JSON ({error})") from None
    if not isinstance(document, dict) or document.get("version") != TEMPLATES_FILE_VERSION:
        raise TemplateError(f'{where} must be {{"version": {TEMPLATES_FILE_VERSION}, ...}}')
    fallback, templates = document.get("fallback_language"), document.get("broadcasts")
    if not isinstance(fallback, str) or not fallback or not isinstance(templates, Mapping):
        raise TemplateError(f'{where} needs "fallback_language" (e.g. "en") and a "broadcasts" object')
    if name not in templates:
        known = ", ".join(sorted(templates)) or "none"
        raise TemplateError(f"{where} has no broadcast {name!r} (it has: {known})")
    texts = templates[name]
    if not isinstance(texts, Mapping) or not all(isinstance(v, str) for v in texts.values()):
        raise TemplateError(f'{where}: {name} must map each language to its text ({{"en": "..."}})')
    texts = {str(language).lower(): value for language, value in texts.items()}
    if fallback.lower() not in texts:
        raise TemplateError(
            f"{where}: {name} has no text in the fallback language {fallback!r}, which every chat "
            "of another language gets"
        )
    for language, value in texts.items():
        try:
            jobs.check_text(value)
        except jobs.BroadcastError as error:
            raise TemplateError(f"{where}: {name} ({language}): {error}") from None
    return Template(name, fallback.lower(), texts)


def team_template(name: str) -> Template:
    """Template `name` of the team's file (PIPELINE_TEAM_DIR's, else team/)."""
    path = team_file(TEMPLATES_FILE_NAME)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TemplateError(f"{path}: cannot read the broadcast texts: {error.strerror}") from None
    return parse(text, name, str(path))
