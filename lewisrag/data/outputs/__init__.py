"""Where commands write: the rules that keep a user's files safe, and atomic folder replacement.

A command never destroys what the user did not make:

- its `--out` folder must be missing, empty, or one that the same kind of command made before (it
  holds the marker file `.lewisrag` naming that kind: an index build never replaces a world or a
  training run); a folder lewisrag did not make that holds anything is refused (exit 2, naming
  a file of it), `--overwrite` or not; another kind of lewisrag output is refused unless
  `--overwrite`, and then the old folder is replaced only once the new one is complete, and only
  when it holds no file lewisrag did not write there (`_foreign`), whatever the flags;
- an output replaced whole by a rerun (an index, a checkpoint) lists in its marker what lewisrag
  wrote there, inside its subfolders too; a file the user added since is refused by name (exit 2),
  not lost, unless `--overwrite`; an output rewritten by a rerun (a world, an evaluation) is
  written whole beside the old one and swapped in, the user's files moved over as hard links
  (`rewritten_dir`); and no `--out` that holds the command's own inputs, the working directory, `/` or a
  folder right under it, a home folder (by $HOME or the user database), a mount point or a git
  repository is ever replaced (`_check_replaceable`), nor one inside an input folder unless lewisrag
  wrote it there as this kind of output (`compare --out RUN/compare`, not `--out RUN/world`), nor a
  part of another lewisrag output, one it wrote and redoes (`holds_part`: its marker lists it, or its
  kind writes outputs of its own there, `PARTS`), that is not this kind's (`reproduce --out RUN/world
  --overwrite`, RUN a reproduction: the world is part of that run, `_check_not_part_of_an_output`) or,
  by a command on its own, that is (`world --out RUN/world`), nor, for a command whose output never
  lies inside another (`check_out_dir(nested=False)`: `reproduce`), any folder below a marked one
  (`reproduce --out RUN/dpr/sub`, `_check_not_inside_an_output`); another output written inside one
  that is not its part (`index build --out WORLD/bm25`: a world writes no index) stands alone, rerun
  and replaced by its own rules, and is the user's to the output around it: kept by its rerun, with
  a warning (`rewritten_dir`), and refused, not lost, by `--overwrite` onto another kind (`_foreign`);
- an `--out` that is a symbolic link is refused (the rename that moves an output in would replace the
  link, not fill its target); a `.NAME.old` or a finished index at `NAME.partial` that lewisrag did
  not leave there is refused, never cleared;
- an existing file where a folder is expected is an error, and is never renamed or removed;
- a folder being replaced that holds a mount point, or anything on another device, is refused by name
  (`_check_one_device`), and a removal never crosses into another file system (`_remove_tree`);
- what the checks passed is looked at again where it would be lost (`replace_dir`, `rewritten_dir`,
  `discard_output`): a file the user put there while the command ran is carried over or refused; a
  check that passes a marked folder remembers, in the process, the files lewisrag did not write that
  it found there (`_remember_check`: those `--overwrite` approved, or none), and `replace_dir`
  replacing that folder with a new output of its kind refuses by name any other found at the swap;
- a file output (`chunk --out passages.jsonl`) replaces an existing file only with `--overwrite`, and
  never one that an output lewisrag marked wrote (`wrote`: an index's manifest.json, a reproduction's
  config.json), whose marker lists it (`record_files`, `note_written`).

Folders are replaced by two renames (old aside, new in, old removed), so a kill at any moment leaves
the old folder or the new one (the old at `.NAME.old`, which the next `check_out_dir` puts back).
The marker lets `--resume` and plain reruns work on lewisrag's own folders without a flag.

Staging folders and temporary files carry their writer's process id and host in their names
(`.NAME.tmp.PID-HOST.xxxx`, `.NAME.PID-HOST.xxxx.tmp`). A process killed where no cleanup runs
(SIGKILL, a power cut) leaves them behind; the next command that writes there removes those whose
process is gone (`sweep_leftovers`), and never one that a live process may still be writing.

The package, one concern a module, each importing only those before it: `paths` (the kernel's name and
identity of a path), `markers` (the `.lewisrag` marker and what it says lewisrag wrote), `removal`
(removing a tree on one file system, `.NAME.old`, killed writers' leftovers), `locks` (`exclusive` and
the remembered checks), `checks` (`check_out_dir`, `check_part`, `check_out_file`, the inputs) and
`replace` (`staged_dir`, `replace_dir`, `rewritten_dir`, `output_dir`, `discard_output`). A test that
patches a name patches it in the module that looks it up (`outputs.checks._identity`).
"""

from lewisrag.data.outputs.checks import (_check_replaceable, check_inputs_outside, check_on_its_own, check_out_dir,
                                          check_out_file, check_part, check_writable)
from lewisrag.data.outputs.locks import exclusive
from lewisrag.data.outputs.markers import (MARKER, PARTS, UNLISTED, _foreign, _matches, added_files, holds_part,
                                           is_free, is_ours, keeps_part, made_by, mark, note_writing, note_written, record_files,
                                           written_files, wrote)
from lewisrag.data.outputs.paths import _identity, physical
from lewisrag.data.outputs.removal import _discard, _remove_tree, existing, sweep_leftovers
from lewisrag.data.outputs.replace import (discard_output, output_dir, replace_dir, rewritten_dir, signals_deferred,
                                           staged_dir, usual_modes)

__all__ = ["MARKER", "PARTS", "UNLISTED", "added_files", "check_inputs_outside", "check_on_its_own", "check_out_dir",
           "check_out_file", "check_part", "check_writable", "discard_output", "exclusive", "existing", "holds_part",
           "is_free", "is_ours", "keeps_part", "made_by", "mark", "note_writing", "note_written", "output_dir", "physical",
           "record_files", "replace_dir", "rewritten_dir", "signals_deferred", "staged_dir", "sweep_leftovers",
           "usual_modes", "written_files", "wrote"]
__all__ += ["_check_replaceable", "_discard", "_foreign", "_identity", "_matches", "_remove_tree"]  # reached by tests
