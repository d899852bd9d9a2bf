"""What a file checkpoints, read from its source and shared by the TD50x rules.

The checkpoint rules all ask the same questions about one file, so they are answered once, by
:func:`~traindoctor.facts.checkpoint.static.index.checkpoint_index` (cached per file), whose
index composes one object per job (the modules, below). What the index knows:

* Which training objects the file builds (optimizers, LR schedulers, GradScalers, samplers and
  loaders), found at their constructor calls and filed under the name they are assigned to.
* Where it saves (``torch.save`` and a few same-signature wrappers) and *what* each save holds:
  the pieces of the saved object (``model.state_dict()``, ``optimizer.state_dict()``, RNG
  getters, ...), following a dict built in a variable across statements
  (``ckpt = {...}; ckpt["optimizer"] = ...; ckpt.update(...)``) and, one level deep, a local
  helper whose parameter is what gets saved (``def save_checkpoint(state, path): torch.save(...)``).
* Whether a save runs inside the training loop (a loop around ``backward()`` / ``optimizer.step()``
  or around a call of a local function that trains), and whether mid-epoch (inside the batch loop).

Precision comes first: whatever cannot be read (a value from an unknown call, a parameter nobody in
the file passes, a dict handed to an unknown function) is an *opaque* piece that may hold anything
its dict key does not rule out, and the rules treat "may hold" as "holds". The file-level view
(``may_hold_anywhere``) unions every save, so a model-only "best" export next to a full checkpoint
elsewhere in the file is never mistaken for the training checkpoint.

The modules, bottom-up: ``vocabulary`` (API names, what names and keys say), ``base`` (the file's
training objects and the shared classification), ``loops``, ``contents`` (what a saved
expression holds), ``saves``, ``paths``, ``checkpoints``, ``resume``, ``rng`` (the generators a
file draws from) and ``index``.
"""
