#!/usr/bin/python3
"""Writes checkpoints as peft and diffusers save them, and checks that a mount shows each
weights file under the name its loader opens (issue 23, item 4), with numpy and torch.

    check_loader_names.py write-pipeline DIR
        A diffusers pipeline as DiffusionPipeline.save_pretrained leaves it: model_index.json;
        unet/ sharded (diffusion_pytorch_model-0000K-of-00002.safetensors + its index json);
        vae/ one diffusion_pytorch_model.safetensors; text_encoder/ model.safetensors (a
        transformers model); tokenizer/ and scheduler/ without weights.
    check_loader_names.py write-adapter-bin DIR
        A peft adapter saved with safe_serialization=False: adapter_model.bin (torch.save of
        the state dict) and adapter_config.json.
    check_loader_names.py write-sentence-transformers DIR
        A sentence-transformers model as SentenceTransformer.save leaves it: modules.json
        (the transformer at "path": "", then 1_Pooling, 2_Normalize), the transformer's
        model.safetensors and config.json at the top, 1_Pooling/config.json, 2_Normalize/
        empty, sentence_bert_config.json.
    check_loader_names.py write-sentence-transformers-dense DIR
        The same with a Dense module after Normalize: 3_Dense/ holding its config.json and
        model.safetensors (Dense.save writes its weights into its own folder).
    check_loader_names.py module-folders SRC MNT
        Every folder modules.json lists is a directory of MNT holding SRC's files with
        their bytes, as SentenceTransformer opens them.
    check_loader_names.py pipeline-root SRC MNT
        MNT is the mount of pipeline SRC's root. As DiffusionPipeline.from_pretrained reads
        it: model_index.json, then for each component it names, that folder: a diffusers
        model's config.json and diffusion_pytorch_model.safetensors, a transformers model's
        config.json and model.safetensors (each merged from SRC's shards: header parsed,
        tensors equal with numpy), a tokenizer's or scheduler's files with SRC's bytes. The
        root holds SRC's regular top files and folders (symlinks never), .ckptfs, and no
        latest or best.
    check_loader_names.py component SRC MNT NAME TORCH_NAME
        MNT is the mount of SRC, a checkpoint directory (a component folder, a peft adapter):
        NAME is at MNT's root, parsed as a loader does (8-byte length, json header, mmap) and
        its tensors equal those stored in SRC (every shard); TORCH_NAME loads with
        torch.load(weights_only=True) to the same tensors; every other file of SRC is at
        MNT's root with its bytes; model.safetensors is there only where NAME is it.
    check_loader_names.py write-variants DIR
        Folders holding weights and their save_pretrained(variant="fp16") variant (issue 38):
        unet/, unet_sharded/ (the variant sharded, with its index), text/ (transformers'
        model.fp16.safetensors), fp16_only/ (the sharded variant alone).
    check_loader_names.py variants SRC MNT NAME TORCH_NAME [VARIANT]
        NAME, TORCH_NAME and tensors/ hold exactly the tensors of VARIANT's files (default:
        the plain ones); every other file of SRC (config.json, the other variant's weights
        and index) is at MNT's root with its bytes.
Exits 1 listing every mismatch, else prints one OK line.
"""

import json
import os
import struct
import sys

import numpy as np
import torch

from checklib import MappedTensors as Tensors

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": np.uint16}
NAMES = {np.dtype(v): k for k, v in DTYPES.items() if k != "BF16"}


def SaveSafetensors(path, tensors):
    """tensors: name -> numpy array; written as safetensors' serialize_file lays a file out."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def Rand(seed, *shape, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def WriteJson(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def WritePipeline(out):
    WriteJson(os.path.join(out, "model_index.json"), {
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
        "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [None, None],
        "feature_extractor": [None, None], "requires_safety_checker": False})
    # unet: ModelMixin.save_pretrained with max_shard_size: shards then the index.
    unet = os.path.join(out, "unet")
    WriteJson(os.path.join(unet, "config.json"), {"_class_name": "UNet2DConditionModel",
                                                  "sample_size": 8})
    shards = [{"conv_in.weight": Rand(1, 8, 4, 3, 3), "conv_in.bias": Rand(2, 8)},
              {"conv_out.weight": Rand(3, 4, 8, 3, 3), "conv_out.bias": Rand(4, 4),
               "time_embedding.linear_1.weight": Rand(5, 16, 8, dtype=np.float16)}]
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        name = "diffusion_pytorch_model-%05d-of-%05d.safetensors" % (k, len(shards))
        SaveSafetensors(os.path.join(unet, name), shard)
        for key, a in shard.items():
            weight_map[key] = name
            total += a.nbytes
    WriteJson(os.path.join(unet, "diffusion_pytorch_model.safetensors.index.json"),
              {"metadata": {"total_size": total}, "weight_map": weight_map})
    vae = os.path.join(out, "vae")
    WriteJson(os.path.join(vae, "config.json"), {"_class_name": "AutoencoderKL"})
    SaveSafetensors(os.path.join(vae, "diffusion_pytorch_model.safetensors"),
                    {"encoder.conv_in.weight": Rand(6, 4, 3, 3, 3),
                     "decoder.conv_out.bias": Rand(7, 3)})
    text = os.path.join(out, "text_encoder")
    WriteJson(os.path.join(text, "config.json"), {"architectures": ["CLIPTextModel"]})
    SaveSafetensors(os.path.join(text, "model.safetensors"),
                    {"text_model.embeddings.token_embedding.weight": Rand(8, 10, 4),
                     "text_model.embeddings.position_ids": np.arange(6, dtype=np.int64)[None]})
    tok = os.path.join(out, "tokenizer")
    WriteJson(os.path.join(tok, "vocab.json"), {"a": 0, "b": 1})
    WriteJson(os.path.join(tok, "tokenizer_config.json"), {"model_max_length": 77})
    WriteJson(os.path.join(tok, "special_tokens_map.json"), {"bos_token": "a"})
    with open(os.path.join(tok, "merges.txt"), "w") as f:
        f.write("#version: 0.2\na b\n")
    WriteJson(os.path.join(out, "scheduler", "scheduler_config.json"),
              {"_class_name": "PNDMScheduler", "num_train_timesteps": 1000})


def WriteSentenceTransformers(out):
    os.makedirs(os.path.join(out, "2_Normalize"), exist_ok=True)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}], f, indent=2)
    WriteJson(os.path.join(out, "config.json"), {"architectures": ["BertModel"]})
    WriteJson(os.path.join(out, "sentence_bert_config.json"), {"max_seq_length": 16})
    WriteJson(os.path.join(out, "1_Pooling", "config.json"),
              {"word_embedding_dimension": 4, "pooling_mode_mean_tokens": True})
    SaveSafetensors(os.path.join(out, "model.safetensors"),
                    {"embeddings.word_embeddings.weight": Rand(9, 10, 4)})


def WriteSentenceTransformersDense(out):
    WriteSentenceTransformers(out)
    with open(os.path.join(out, "modules.json")) as f:
        modules = json.load(f)
    modules.append({"idx": 3, "name": "3", "path": "3_Dense",
                    "type": "sentence_transformers.models.Dense"})
    WriteJson(os.path.join(out, "modules.json"), modules)
    WriteJson(os.path.join(out, "3_Dense", "config.json"),
              {"in_features": 4, "out_features": 2, "bias": True})
    SaveSafetensors(os.path.join(out, "3_Dense", "model.safetensors"),
                    {"linear.weight": Rand(11, 2, 4), "linear.bias": Rand(12, 2)})


VIEWS = {".ckptfs", "pytorch_model", "pytorch_model.bin", "shards", "tensors", "model.safetensors"}


def CheckModuleFolders(src, mnt, errors):
    for module in json.load(open(os.path.join(mnt, "modules.json"))):
        if not module["path"]:
            continue
        folder = os.path.join(mnt, module["path"])
        if not os.path.isdir(folder):
            errors.append("%s is not a directory of the mount" % module["path"])
            continue
        want = sorted(os.listdir(os.path.join(src, module["path"])))
        shown = sorted(os.listdir(folder))
        # A folder holding weights is that module's checkpoint: its files and its views.
        if any(f.endswith(".safetensors") for f in want):
            shown = [f for f in shown if f not in VIEWS or f in want]
        if shown != want:
            errors.append("%s holds %s, want %s" % (module["path"], os.listdir(folder), want))
        for f in want:
            if open(os.path.join(folder, f), "rb").read() != \
                    open(os.path.join(src, module["path"], f), "rb").read():
                errors.append("%s/%s differs from SOURCE's" % (module["path"], f))


def WriteAdapterBin(out):
    os.makedirs(out, exist_ok=True)
    WriteJson(os.path.join(out, "adapter_config.json"), {"peft_type": "LORA", "r": 4})
    state = {"base_model.model.q_proj.lora_A.weight": torch.randn(4, 16),
             "base_model.model.q_proj.lora_B.weight": torch.zeros(16, 4)}
    torch.save(state, os.path.join(out, "adapter_model.bin"))




def StoredTensors(src):
    """The tensors of SRC's safetensors or torch weight files, together."""
    out = {}
    for f in sorted(os.listdir(src)):
        path = os.path.join(src, f)
        if f.endswith(".safetensors"):
            out.update(Tensors(path))
        elif f.endswith(".bin"):
            for k, t in torch.load(path, weights_only=True).items():
                a = t.numpy()
                out[k] = (NAMES[a.dtype], list(a.shape), a.tobytes())
    return out


def IsWeights(name):
    return name.endswith(".safetensors") or name.endswith(".bin") or ".index.json" in name


def CheckComponent(src, mnt, name, torch_name, errors):
    want = StoredTensors(src)
    got = Tensors(os.path.join(mnt, name))
    if got != want:
        errors.append("%s: tensors %s differ from SOURCE's %s" % (name, sorted(got), sorted(want)))
    loaded = torch.load(os.path.join(mnt, torch_name), weights_only=True)
    as_stored = {k: (NAMES[t.numpy().dtype], list(t.shape), t.numpy().tobytes())
                 for k, t in loaded.items()}
    if as_stored != want:
        errors.append("%s: torch.load gives %s, want %s" % (torch_name, sorted(as_stored),
                                                            sorted(want)))
    shown = set(os.listdir(mnt))
    for other in ("model.safetensors", "pytorch_model.bin"):
        if other not in (name, torch_name) and other in shown:
            errors.append("%s is shown beside %s: a loader would take it for a model" %
                          (other, name))
    for f in os.listdir(src):
        if os.path.isdir(os.path.join(src, f)):
            continue  # module-folders checks those
        if IsWeights(f):
            if f not in os.listdir(os.path.join(mnt, "shards")):
                errors.append("%s is not in shards/" % f)
            continue
        if f not in shown:
            errors.append("%s is not at the root" % f)
        elif open(os.path.join(mnt, f), "rb").read() != open(os.path.join(src, f), "rb").read():
            errors.append("%s differs from SOURCE's" % f)


def WriteVariants(out):
    """Folders as save_pretrained(variant="fp16") leaves them beside (or without) the plain
    weights: unet/ (both lone), unet_sharded/ (plain lone, fp16 sharded with
    diffusion_pytorch_model.safetensors.index.fp16.json), text/ (transformers:
    model.safetensors and model.fp16.safetensors), fp16_only/ (the sharded fp16 alone)."""
    d = "diffusion_pytorch_model"
    plain = {"conv_in.weight": Rand(11, 4, 2, 3, 3), "conv_in.bias": Rand(12, 4)}
    half = {k: Rand(20 + i, *a.shape, dtype=np.float16) for i, (k, a) in enumerate(plain.items())}
    for folder, stem in (("unet", d), ("text", "model")):
        WriteJson(os.path.join(out, folder, "config.json"), {"_class_name": folder})
        SaveSafetensors(os.path.join(out, folder, stem + ".safetensors"), plain)
        SaveSafetensors(os.path.join(out, folder, stem + ".fp16.safetensors"), half)
    for folder, with_plain in (("unet_sharded", True), ("fp16_only", False)):
        root = os.path.join(out, folder)
        WriteJson(os.path.join(root, "config.json"), {"_class_name": "UNet2DConditionModel"})
        if with_plain:
            SaveSafetensors(os.path.join(root, d + ".safetensors"), plain)
        weight_map = {}
        for k, name in enumerate(sorted(half), 1):
            shard = "%s.fp16-%05d-of-%05d.safetensors" % (d, k, len(half))
            SaveSafetensors(os.path.join(root, shard), {name: half[name]})
            weight_map[name] = shard
        WriteJson(os.path.join(root, d + ".safetensors.index.fp16.json"),
                  {"metadata": {"total_size": sum(a.nbytes for a in half.values())},
                   "weight_map": weight_map})


def CheckVariants(src, mnt, name, torch_name, variant, errors):
    """MNT's merged views NAME and TORCH_NAME hold the weights of VARIANT ("" for the plain
    ones) and nothing else, tensors/ too; every SOURCE file of another variant is at the
    root, byte for byte."""
    files = [f for f in sorted(os.listdir(src)) if os.path.isfile(os.path.join(src, f))]
    ours = [f for f in files if f.endswith(".safetensors") and
            (("." + variant) in f if variant else ".fp16" not in f)]
    want = {}
    for f in ours:
        want.update(Tensors(os.path.join(src, f)))
    got = Tensors(os.path.join(mnt, name))
    if got != want:
        errors.append("%s: tensors %s differ from %s's" % (name, sorted(got), ours))
    loaded = torch.load(os.path.join(mnt, torch_name), weights_only=True)
    as_stored = {k: (NAMES[t.numpy().dtype], list(t.shape), t.numpy().tobytes())
                 for k, t in loaded.items()}
    if as_stored != want:
        errors.append("%s: torch.load gives other tensors than %s" % (torch_name, ours))
    for k, (dtype, shape, data) in want.items():
        a = np.load(os.path.join(mnt, "tensors", *k.split(".")) + ".npy")
        if a.tobytes() != data:
            errors.append("tensors/%s.npy differs from %s" % (k.replace(".", "/"), ours))
    shown = set(os.listdir(mnt))
    for f in files:
        if f in ours or (variant and ".index." in f):
            continue  # the checkpoint's own: merged above, in shards/
        # config.json and every file of another variant: at the root, unchanged.
        if f not in shown:
            errors.append("%s (SOURCE) is not at the root" % f)
        elif open(os.path.join(mnt, f), "rb").read() != open(os.path.join(src, f), "rb").read():
            errors.append("%s differs from SOURCE's" % f)


def Regular(path):
    return os.path.isfile(path) and not os.path.islink(path)


def CheckPipelineRoot(src, mnt, errors):
    shown = sorted(os.listdir(mnt))
    want = sorted([f for f in os.listdir(src)
                   if Regular(os.path.join(src, f)) or
                   (os.path.isdir(os.path.join(src, f)) and
                    not os.path.islink(os.path.join(src, f)))] + [".ckptfs"])
    if shown != want:
        errors.append("root holds %s, want %s" % (shown, want))
    for pointer in ("latest", "best"):
        if os.path.lexists(os.path.join(mnt, pointer)):
            errors.append("%s is shown: a pipeline's components are no saves" % pointer)
    index = json.load(open(os.path.join(mnt, "model_index.json")))
    if open(os.path.join(mnt, "model_index.json"), "rb").read() != \
            open(os.path.join(src, "model_index.json"), "rb").read():
        errors.append("model_index.json differs from SOURCE's")
    for component, value in sorted(index.items()):
        if component.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        library, cls = value
        folder, stored = os.path.join(mnt, component), os.path.join(src, component)
        if not os.path.isdir(folder):
            errors.append("%s/ (%s.%s) is not a directory of the mount" % (component, library, cls))
            continue
        if cls.endswith("Model") or cls == "AutoencoderKL":
            # ModelMixin / PreTrainedModel.from_pretrained(folder): config.json, then the
            # weights file under its loader's name.
            name = "diffusion_pytorch_model.safetensors" if library == "diffusers" \
                else "model.safetensors"
            opened = ["config.json", name]
            got, want_t = Tensors(os.path.join(folder, name)), StoredTensors(stored)
            if sorted(got) != sorted(want_t):
                errors.append("%s/%s: tensors %s, want %s" % (component, name, sorted(got),
                                                              sorted(want_t)))
            for key in sorted(set(got) & set(want_t)):
                dtype = DTYPES[got[key][0]]
                a = np.frombuffer(got[key][2], dtype).reshape(got[key][1])
                b = np.frombuffer(want_t[key][2], dtype).reshape(want_t[key][1])
                if got[key][:2] != want_t[key][:2] or not np.array_equal(a, b):
                    errors.append("%s/%s: %s differs" % (component, name, key))
        else:
            # A tokenizer, scheduler or feature extractor: its files, as saved.
            opened = sorted(f for f in os.listdir(stored) if Regular(os.path.join(stored, f)))
            if sorted(os.listdir(folder)) != opened:
                errors.append("%s/ holds %s, want %s" % (component, sorted(os.listdir(folder)),
                                                         opened))
        for f in opened:
            path = os.path.join(folder, f)
            if not os.path.isfile(path):
                errors.append("%s/%s is not shown" % (component, f))
            elif f.endswith(".json") or f.endswith(".txt"):
                if open(path, "rb").read() != open(os.path.join(stored, f), "rb").read():
                    errors.append("%s/%s differs from SOURCE's" % (component, f))


def main(argv):
    errors = []
    if argv[1] == "write-pipeline":
        WritePipeline(argv[2])
    elif argv[1] == "write-adapter-bin":
        WriteAdapterBin(argv[2])
    elif argv[1] == "write-sentence-transformers":
        WriteSentenceTransformers(argv[2])
    elif argv[1] == "write-sentence-transformers-dense":
        WriteSentenceTransformersDense(argv[2])
    elif argv[1] == "module-folders":
        CheckModuleFolders(argv[2], argv[3], errors)
    elif argv[1] == "pipeline-root":
        CheckPipelineRoot(argv[2], argv[3], errors)
    elif argv[1] == "write-variants":
        WriteVariants(argv[2])
    elif argv[1] == "variants":
        CheckVariants(argv[2], argv[3], argv[4], argv[5], argv[6] if len(argv) > 6 else "",
                      errors)
    elif argv[1] == "component":
        CheckComponent(argv[2], argv[3], argv[4], argv[5], errors)
    else:
        sys.exit("unknown mode " + argv[1])
    if errors:
        print("\n".join(errors))
        return 1
    print("OK " + argv[1] + " " + " ".join(argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
