"""`datasets` save_to_disk folders: state.json and dataset_info.json checked field by field before
datasets loads the folder (`_saved_dataset`), and when it fails, the Arrow file, feature or format at
fault named (`_name_what_failed`); when it loads, an Arrow file cut short refused (`_refuse_cut_stream`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lewisrag.data.io import InputError, expect, first_line, one_line, read_json

# what datasets' load_from_disk reads from state.json beside `_data_files`: (field, check, expected)
STATE_FIELDS = (
    ("_fingerprint", lambda v: isinstance(v, str), "a string"),
    ("_split", lambda v: v is None or isinstance(v, str), "a split name or null"),
    ("_format_type", lambda v: v is None or isinstance(v, str), "a format name or null"),
    ("_format_kwargs", lambda v: isinstance(v, dict), "an object"),
    ("_format_columns", lambda v: v is None or (isinstance(v, list) and all(isinstance(c, str) for c in v)),
     "a list of column names or null"),
    ("_output_all_columns", lambda v: isinstance(v, bool), "true or false"),
)


def _saved_dataset(p: Path) -> tuple[pa.Table, list[Path]]:
    """The Arrow table of a `datasets` save_to_disk folder, and the Arrow files state.json lists (its
    rows, in order). Its state.json and dataset_info.json are checked first, field by field, so that a
    damaged one is named with the field at fault (datasets itself fails with a KeyError or TypeError
    naming neither); then datasets loads it."""
    if (p / "dataset_dict.json").is_file():
        meta = read_json(p / "dataset_dict.json")
        splits = meta.get("splits") if isinstance(meta, dict) else None
        if not isinstance(splits, list) or not splits:
            raise InputError(p / "dataset_dict.json", "expected a non-empty list of split names (datasets' DatasetDict "
                             "layout)", field="splits")
        for i, split in enumerate(splits):
            expect(isinstance(split, str) and bool(split.strip()), p / "dataset_dict.json", f"splits[{i}]",
                   "a split name (the name of a folder beside it)", split)
        raise InputError(p, f"holds a DatasetDict (splits: {', '.join(splits)}): give one split's folder, e.g. {p / splits[0]}")
    if not (p / "state.json").is_file():
        below = _data_folder_below(p)
        hint = f"; one lies below it, in {below} (a hub download keeps its files under data/): give that folder" if below else ""
        raise InputError(p, "is a folder, but neither a dataset written by datasets' save_to_disk (no state.json) nor a "
                         f"folder of .parquet shards{hint}")
    files, state = _check_state(p, p / "state.json")
    info = _check_info(p / "dataset_info.json")
    import datasets  # loads on first use (~1 s): only save_to_disk folders need it

    try:
        dataset = datasets.load_from_disk(str(p))
    except Exception as e:  # damaged or foreign files: the user's input, named as closely as can be
        _name_what_failed(files, state, info, p)
        raise InputError(p, f"cannot load the saved dataset: {first_line(e)}") from None
    for f in files:
        _refuse_cut_stream(f)
    return _dataset_table(dataset), files


# what closes an Arrow IPC stream: a continuation token and a zero length (pyarrow's stream format,
# which datasets' ArrowWriter writes and closes every file with)
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _refuse_cut_stream(f: Path) -> None:
    """Refuse an Arrow file of a save_to_disk folder that does not end with the end-of-stream marker.
    A stream cut at a record-batch boundary (a copy or download that stopped short) still loads, as
    its first batches: without this, a corpus of fewer passages than were saved, and not a word. Read
    after datasets has loaded the folder, so that a file it cannot read is named as such first."""
    with open(f, "rb") as stream:
        stream.seek(max(f.stat().st_size - len(END_OF_STREAM), 0))
        if stream.read() != END_OF_STREAM:
            raise InputError(f, "truncated: no Arrow end-of-stream marker (a copy or download that stopped short?)")


def _data_folder_below(folder: Path, depth: int = 4) -> Path | None:
    """The first folder under `folder` (breadth first, at most `depth` levels down, hidden folders
    such as the hub client's .cache/ left out) that holds .parquet shards or a save_to_disk state.json."""
    level = [folder]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                entries = sorted(d.iterdir())
            except OSError:
                continue
            if d != folder and any(e.suffix.lower() == ".parquet" or e.name == "state.json" for e in entries):
                return d
            nxt += [e for e in entries if e.is_dir() and not e.name.startswith(".")]
        level = nxt[:1000]  # a bounded look, not a walk of a whole disk
    return None


def _check_state(folder: Path, path: Path) -> tuple[list[Path], dict]:
    """The Arrow files state.json lists, each checked to be a file in `folder`, and state.json, its
    other fields checked."""
    state = read_json(path)
    if not isinstance(state, dict):
        raise InputError(path, f"expected a JSON object (datasets' save_to_disk state), got {type(state).__name__}")
    listed = state.get("_data_files")
    if listed is None:
        raise InputError(path, "missing", field="_data_files")
    expect(isinstance(listed, list) and bool(listed), path, "_data_files", 'a non-empty list of {"filename": ...}', listed)
    files = []
    for i, item in enumerate(listed):
        name = item.get("filename") if isinstance(item, dict) else None
        if not isinstance(item, dict):
            expect(False, path, f"_data_files[{i}]", 'an object {"filename": ...}', item)
        expect(isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name, path,
               f"_data_files[{i}].filename", "the name of an Arrow file in the folder", name)
        if not (folder / name).is_file():
            raise InputError(path, f"'{name}' is not a file in {folder}", field=f"_data_files[{i}].filename")
        files.append(folder / name)
    for field, ok, what in STATE_FIELDS:
        if field not in state:
            raise InputError(path, "missing", field=field)
        expect(ok(state[field]), path, field, what, state[field])
    return files, state


def _check_info(path: Path) -> dict:
    """dataset_info.json, each field read by datasets on its own so that the one it refuses is named."""
    if not path.is_file():
        raise InputError(path, "file not found (datasets' save_to_disk writes it beside state.json)")
    info = read_json(path)
    if not isinstance(info, dict):
        raise InputError(path, f"expected a JSON object (datasets' DatasetInfo), got {type(info).__name__}")
    features = info.get("features")
    expect(features is None or isinstance(features, dict), path, "features", "an object of column features or null", features)
    import datasets  # loads on first use (~1 s): only save_to_disk folders need it

    try:
        datasets.DatasetInfo.from_dict(info)
    except Exception as whole:
        for field, value in info.items():
            try:
                datasets.DatasetInfo.from_dict({field: value})
            except Exception as e:
                raise InputError(path, f"datasets cannot read it: {first_line(e)}", field=field) from None
        raise InputError(path, f"datasets cannot read it: {first_line(whole)}") from None
    return info


def _name_what_failed(files: list[Path], state: dict, info: dict, folder: Path) -> None:
    """After datasets failed to load a checked folder: an InputError naming the Arrow file that
    cannot be read, dataset_info.json's features when they do not describe the files' columns, or
    the format in state.json that datasets refuses; nothing if none of them is the cause."""
    import datasets  # loads on first use: as in _saved_dataset

    schema = None
    for f in files:
        try:
            with pa.memory_map(str(f)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except Exception as e:  # datasets writes Arrow streams; anything else is damaged or foreign
            raise InputError(f, f"cannot read the Arrow file: {one_line(e)}") from None
        if schema is not None and table.schema != schema:
            raise InputError(f, f"its columns differ from those of {files[0].name}")
        schema = table.schema
    if schema is None:
        return
    if info.get("features") is not None:
        try:
            listed = datasets.Features.from_dict(info["features"])
            stored = datasets.Features.from_arrow_schema(schema)
            same = listed.reorder_fields_as(stored).type == stored.type
            why = "" if same else f"{listed} (here) against {stored} (the Arrow files)"
        except Exception as e:
            why = first_line(e)
        if why:
            raise InputError(folder / "dataset_info.json", f"does not describe the Arrow files' columns: {why}", field="features")
    empty, settings = datasets.Dataset(schema.empty_table()), {}
    for field, key in (("_format_type", "type"), ("_format_columns", "columns"), ("_output_all_columns", "output_all_columns"),
                       ("_format_kwargs", None)):  # one more at a time, as load_from_disk passes them all
        settings = {**settings, **(state[field] if key is None else {key: state[field]})}
        try:
            empty.with_format(**settings)
        except Exception as e:
            raise InputError(folder / "state.json", f"datasets refuses it: {first_line(e)}", field=field) from None


def _dataset_table(ds) -> pa.Table:
    """The Arrow table behind a `datasets.Dataset`, memory-mapped where the dataset is."""
    if getattr(ds, "_indices", None) is None:
        return ds.data.table  # the memory-mapped table itself
    return ds.with_format("arrow")[:]  # rows picked or reordered by an indices mapping
