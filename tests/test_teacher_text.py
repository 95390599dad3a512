"""grpolab.teacher_text: the teacher's text and tokens, importable without torch."""

import subprocess
import sys


def test_config_and_teacher_text_import_without_torch():
    code = ("import sys, grpolab.config, grpolab.teacher_text; "
            "grpolab.config.CreditConfig().teacher_prompt(); grpolab.teacher_text.check_template('{prompt} {privileged}'); "
            "sys.exit(3 if 'torch' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_credit_row_module_does_not_shadow_the_credit_metrics_function():
    import grpolab.objectives as objectives
    import grpolab.objectives.credit_row  # noqa: F401
    from grpolab.objectives.credit import credit_metrics

    assert objectives.credit_metrics is credit_metrics
