"""The counsellor persona's system prompt used in the training data.

The app should open its chats with the same text (or start its meta prompt with it), so that
the fine-tuned model sees at inference the format it was trained on. The prompt used for an
adapter is also saved in its ``siliconfriend_adapter.json`` (``"system_prompt"``).
"""

from __future__ import annotations

from memory.cjk import language_of

COUNSELLOR_SYSTEM_PROMPT_EN = (
    "You are SiliconFriend, a warm and patient AI companion. Reply like a good listener and "
    "counsellor: understand and acknowledge the user's feelings, comfort and support them, and "
    "offer practical suggestions when they help."
)

COUNSELLOR_SYSTEM_PROMPT_ZH = (
    "你是硅基朋友（SiliconFriend），一位温暖、耐心的AI伴侣。请像一位善于倾听的心理咨询师那样回应："
    "理解并体会用户的感受，给予安慰和支持，并在合适的时候提出切实可行的建议。"
)

COUNSELLOR_SYSTEM_PROMPTS = {"en": COUNSELLOR_SYSTEM_PROMPT_EN, "zh": COUNSELLOR_SYSTEM_PROMPT_ZH}


def counsellor_system_prompt(text: str, language: str = "auto") -> str:
    """The persona prompt for a dialogue whose text is ``text`` (language detected if 'auto')."""
    lang = language_of(text) if language == "auto" else language
    if lang not in COUNSELLOR_SYSTEM_PROMPTS:
        raise ValueError(
            f"no counsellor prompt for language {lang!r}; choose one of {sorted(COUNSELLOR_SYSTEM_PROMPTS)} or 'auto'"
        )
    return COUNSELLOR_SYSTEM_PROMPTS[lang]
