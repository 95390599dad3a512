"""Importing this module registers grpolab's losses and estimators in verl.

It is the target of grpolab's ``verl.plugins`` entry point (verl loads every installed plugin when
``import verl`` runs, in the driver and in every Ray worker) and can be named explicitly with
``VERL_USE_EXTERNAL_MODULES=grpolab.integrations.verl.plugin``. It also lets verl build models
next to TRL 1.16 (:func:`grpolab.integrations.verl.losses.guard_trl_value_head`). See docs/scale-out.md.
"""

from grpolab.integrations.verl.losses import guard_trl_value_head, register

REGISTERED = register()
guard_trl_value_head()
