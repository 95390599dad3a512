"""The privileged teacher's template text, written once (RLSD / GEAR / OPSD; docs/credit.md).

They are the defaults of grpolab's credit schema (:class:`grpolab.config.CreditConfig`:
``template`` / ``chat_template`` / ``system_template``), so grpolab's own trainer (``credit.X``),
the TRL adapter (``grpolab_credit_X``), the verl extension (``grpolab.credit.chat_template``), the
warm start's privileged rows and the rollout's teacher prompts all default to these strings. Fields: ``{prompt}`` (the student's question, or its
last user turn), ``{privileged}`` (the item's privileged context, else its reference answer) and
``{reference}``. Plain text (no torch) so that the config can import it.
"""

__all__ = ["DEFAULT_CHAT_TEACHER_TEMPLATE", "DEFAULT_SYSTEM_TEACHER_TEMPLATE", "DEFAULT_TEACHER_TEMPLATE"]

#: Plain-text prompts: the question, the reference solution, an instruction to solve it in its own
#: way, and the question again (so that a completion-style prompt such as ``"7+5-3="`` is what the
#: response continues). Lower case and ``.``/``:`` only: it fits the tiny character-level
#: tokenizer's alphabet (``grpolab.models.tokenizer.DEFAULT_ALPHABET``) with no ``<unk>``.
DEFAULT_TEACHER_TEMPLATE = (
    "{prompt}\nhere is a reference solution: {privileged}\n"
    "solve it in your own way.\n{prompt}"
)

#: Chat-template prompts, placement ``user``: the last user turn becomes this ({prompt}: that turn).
DEFAULT_CHAT_TEACHER_TEMPLATE = (
    "{prompt}\n\nHere is a reference solution:\n{privileged}\n\nSolve the problem in your own way."
)

#: Chat-template prompts, placement ``system``: added as (or to) the system message.
DEFAULT_SYSTEM_TEACHER_TEMPLATE = (
    "A reference solution to the user's problem (for you only; do not mention it):\n{privileged}"
)
