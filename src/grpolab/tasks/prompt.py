"""Prompt formatting: how a :class:`~grpolab.tasks.TaskItem` becomes the token ids the policy reads.

A task item carries the question (``item.prompt``) and, for conversational datasets in TRL's
format, the whole conversation (``item.messages``: a list of ``{"role", "content"}``). How that
reaches the model is a property of the *run* (which tokenizer, base or instruct model), so it is
described by one :class:`PromptFormat`:

* ``chat_template``: ``"on"`` renders the conversation with the tokenizer's own chat template and
  ``add_generation_prompt=True`` (what the model saw in its chat fine-tuning); ``"off"`` feeds plain
  text (base models, the tiny model); ``"auto"`` (default) is on whenever the tokenizer defines a
  chat template and off when it has none. A base checkpoint that ships a template (Qwen2.5 base
  models do) is prompted through it too: set ``off`` to prompt it with plain text. Every command
  resolves it the same way (:func:`grpolab.runs.open_run`, the trainer's setup) and prints which
  format it uses.
* ``system_prompt``: an optional system message (chat) or a first line (plain text).
* ``prompt_template``: how the question becomes the user turn (chat) or the whole prompt (plain),
  with ``{prompt}`` for the question, e.g. ``"Question: {prompt}\\nAnswer:"``.

:meth:`PromptFormat.encode_messages` is the one place a message list becomes ids, so the
student's prompt and the privileged teacher prompt of RLSD/GEAR/OPSD (built at the message level
by :func:`grpolab.teacher_text.teacher_messages`) are rendered by the same template and both
end with the same generation prompt: the response tokens that follow are identical and aligned.

Encoding: chat-rendered text already holds the template's special tokens (Llama-3's template
writes its own BOS), so it is tokenised with ``add_special_tokens=False``; plain text is tokenised
with the tokenizer's special tokens and a BOS is prepended when the tokenizer has one.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = [
    "CHAT_TEMPLATE_MODES",
    "PromptFormat",
    "check_messages",
]

CHAT_TEMPLATE_MODES = ("auto", "on", "off")
ROLES = ("system", "user", "assistant", "tool")

def check_messages(messages: Any, where: str = "messages") -> list[dict[str, str]]:
    """Validate a TRL-style conversation and return it as a list of plain ``{role, content}`` dicts.

    Raises:
        ValueError: not a non-empty list of mappings with a known ``role`` and a string
            ``content``, or no user turn.
    """
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(f"{where} must be a non-empty list of {{'role': ..., 'content': ...}} messages, "
                         f"got {type(messages).__name__} {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"{where}[{i}] must be a mapping with 'role' and 'content', got {m!r:.80}")
        role, content = m["role"], m["content"]
        if role not in ROLES:
            raise ValueError(f"{where}[{i}].role={role!r}; use one of {ROLES}")
        if not isinstance(content, str):
            raise ValueError(f"{where}[{i}].content must be a string (multimodal parts are not supported), "
                             f"got {type(content).__name__}")
        out.append({"role": role, "content": content})
    if not any(m["role"] == "user" for m in out):
        raise ValueError(f"{where} has no user message; a prompt needs at least one turn with role 'user'")
    return out


def _fields(template: str) -> set[str]:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise ValueError(f"prompt template {template!r} is not a valid format string ({e}); "
                         "escape literal braces as '{{' and '}}'") from None


@dataclass(frozen=True)
class PromptFormat:
    """How items become prompts (see the module docstring).

    Attributes:
        chat_template: "auto" | "on" | "off" (already resolved by :meth:`resolve` to "on"/"off").
        system_prompt: optional system message ("" = none).
        prompt_template: format string with ``{prompt}``; applied to the question of items
            without a conversation, and to the last user turn of conversations.
    """

    chat_template: str = "auto"
    system_prompt: str = ""
    prompt_template: str = "{prompt}"
    #: The longest item prompt :meth:`encode` returns (0 = no limit) and what happens to a longer
    #: one (:func:`grpolab.rollout.prompts.truncate_prompt`: error, left, right); set from
    #: rollout.max_prompt_tokens / rollout.prompt_truncation by the run's setup.
    max_prompt_tokens: int = 0
    truncation: str = "error"

    def __post_init__(self) -> None:
        if self.chat_template not in CHAT_TEMPLATE_MODES:
            raise ValueError(f"chat_template={self.chat_template!r}; choose one of {CHAT_TEMPLATE_MODES}")
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"system_prompt must be a string, got {type(self.system_prompt).__name__}")
        fields = _fields(self.prompt_template)
        if fields != {"prompt"}:
            raise ValueError(f"prompt_template must contain {{prompt}} and no other field, got "
                             f"{self.prompt_template!r} (fields: {sorted(fields)})")

    # ------------------------------------------------------------------ resolution
    @property
    def use_chat(self) -> bool:
        if self.chat_template == "auto":
            raise RuntimeError("PromptFormat.chat_template is still 'auto'; call resolve(tokenizer, ...) first")
        return self.chat_template == "on"

    def resolve(self, tokenizer) -> "PromptFormat":
        """A copy with ``chat_template`` decided ("on"/"off") for this tokenizer: ``auto`` is on
        exactly when the tokenizer defines a chat template.

        Raises:
            ValueError: ``"on"`` with a tokenizer that has no chat template.
        """
        has = bool(getattr(tokenizer, "chat_template", None))
        mode = self.chat_template
        if mode == "on" and not has:
            raise ValueError(
                "task.chat_template=on but the tokenizer has no chat template; use a model directory whose "
                "tokenizer_config.json holds one (instruct models do), or set task.chat_template=off")
        if mode == "auto":
            mode = "on" if has else "off"
        import dataclasses

        return dataclasses.replace(self, chat_template=mode)

    def describe(self) -> str:
        """One line naming the resolved format, e.g. for a command's log."""
        what = "the tokenizer's chat template" if self.use_chat else "plain text (no chat template)"
        extra = [f"system prompt {self.system_prompt[:40]!r}"] if self.system_prompt else []
        extra += [f"prompt template {self.prompt_template[:40]!r}"] if self.prompt_template != "{prompt}" else []
        return what + (f", {', '.join(extra)}" if extra else "")

    # ------------------------------------------------------------------ messages
    def messages(self, item) -> list[dict[str, str]]:
        """The conversation of ``item`` as the policy sees it (system prompt first, template applied).

        Items without ``messages`` become one user turn ``prompt_template.format(prompt=item.prompt)``.
        In a conversation the last user turn goes through ``prompt_template``; ``system_prompt``
        is prepended unless the conversation already starts with a system message.
        """
        conv = getattr(item, "messages", None)
        if conv:
            msgs = [dict(m) for m in conv]
            last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
            msgs[last_user]["content"] = self.prompt_template.format(prompt=msgs[last_user]["content"])
        else:
            msgs = [{"role": "user", "content": self.prompt_template.format(prompt=item.prompt)}]
        if self.system_prompt and msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return msgs

    def render_messages(self, messages: Sequence[dict[str, str]], tokenizer) -> str:
        """The prompt text of a conversation: the chat template with the generation prompt, or plain text.

        Plain text (chat off): the system message, if any, on its own line, then the user turn.
        A conversation with assistant turns needs a chat template (a plain prefix cannot mark turns).
        """
        if self.use_chat:
            return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        roles = [m["role"] for m in messages]
        if any(r not in ("system", "user") for r in roles) or roles.count("user") != 1:
            raise ValueError(
                "a multi-turn conversation needs a chat template to render (task.chat_template=on with a "
                f"tokenizer that has one); with chat_template=off only [system,] user prompts work, got roles {roles}")
        return "\n".join(m["content"] for m in messages)

    def encode_messages(self, messages: Sequence[dict[str, str]], tokenizer) -> list[int]:
        """Token ids of a conversation's prompt (see the module docstring for special tokens)."""
        from grpolab.models.tokenizer import check_encodable

        text = self.render_messages(messages, tokenizer)
        if self.use_chat:
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
            bos = getattr(tokenizer, "bos_token_id", None)
            if bos is not None and (not ids or ids[0] != bos):
                ids = [bos] + ids
        check_encodable(tokenizer, text, ids)
        return ids

    def render(self, item, tokenizer) -> str:
        """The prompt text of one item."""
        return self.render_messages(self.messages(item), tokenizer)

    def encode(self, items: Sequence, tokenizer) -> list[list[int]]:
        """Token ids of each item's prompt (the trainer's and the evaluator's encoder), cut to
        ``max_prompt_tokens`` as ``truncation`` says (the run's setup has checked every item first)."""
        from grpolab.rollout.prompts import truncate_prompt

        return [truncate_prompt(self.encode_messages(self.messages(it), tokenizer), self.max_prompt_tokens,
                                self.truncation) for it in items]

    def to_dict(self) -> dict[str, str]:
        return {"chat_template": self.chat_template, "system_prompt": self.system_prompt,
                "prompt_template": self.prompt_template}
