"""Framework integrations: what Lightning, Hugging Face ``transformers`` and ``accelerate`` handle.

* :mod:`traindoctor.integrations.frameworks` says which events the framework itself caused (its
  own checkpointing, for instance), so the doctor does not report on what the framework handles.
* :mod:`traindoctor.integrations.lightning` and :mod:`traindoctor.integrations.transformers`
  hold a ``DoctorCallback`` each: added to the trainer, a plain ``python train.py`` is watched
  and the findings go to the framework's logger and to stderr at the end of fit/train.

Importing this package imports neither torch nor any framework.
"""
