"""grpolab.teacher_text: the teacher's text and tokens, importable without torch; the old paths
in grpolab.rollout.teacher re-export the same objects for one release."""

import subprocess
import sys


def test_config_and_teacher_text_import_without_torch():
    code = ("import sys, grpolab.config, grpolab.teacher_text; "
            "grpolab.config.CreditConfig().teacher_prompt(); grpolab.teacher_text.check_template('{prompt} {privileged}'); "
            "sys.exit(3 if 'torch' in sys.modules else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_old_paths_re_export_the_same_objects():
    import grpolab.objectives.credit_row as cm
    import grpolab.rollout as rollout
    import grpolab.rollout.teacher as old
    import grpolab.teacher_text as new

    for name in ("CreditTokens", "TeacherPrompt", "build_teacher_prompts", "check_template", "teacher_messages",
                 "token_ids_containing", "PLACEMENTS", "DEFAULT_TEACHER_TEMPLATE"):
        assert getattr(old, name) is getattr(new, name), name
    for name in ("CreditTokens", "build_teacher_prompts", "check_template", "teacher_messages"):
        assert getattr(rollout, name) is getattr(new, name), name
    assert old.credit_step_metrics is cm.credit_step_metrics
    # the module's name does not shadow the package's credit_metrics function once it is imported
    import grpolab.objectives as objectives
    from grpolab.objectives.credit import credit_metrics

    assert objectives.credit_metrics is credit_metrics
