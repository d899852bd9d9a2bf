"""Framework integrations: what Lightning, Hugging Face ``transformers`` and ``accelerate`` handle.

* :mod:`traindoctor.integrations.lightning` and :mod:`traindoctor.integrations.transformers`
  hold a ``DoctorCallback`` each: added to the trainer, a plain ``python train.py`` is watched
  and the findings go to the framework's logger and to stderr at the end of fit/train.

Which saves a framework's own checkpoint writer made (the doctor does not judge them) is the
runtime core's to tell: :mod:`traindoctor.runtime.framework_writers`.

Importing this package imports neither torch nor any framework.
"""
