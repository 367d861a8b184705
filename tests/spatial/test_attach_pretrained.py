"""attach(..., checkpoint_path=...): a timm weights file loaded before the encoding is swapped,
with a report of exactly which tensors are new and which were dropped; timm_state_dict back."""

from __future__ import annotations

import pytest
import timm
import torch
from posenc.spatial import ENCODINGS, AttachReport, Learned2D, attach, timm_state_dict
from spatial_models import PATCH, TRAIN_SIZE, make_vit
from timm.layers import resample_abs_pos_embed

DEPTH = 2


def _pretrained(tmp_path, family: str = "vit", **kwargs):
    """A timm ViT (random weights standing for pretrained ones) and the file it is saved to."""
    source = make_vit(family, dynamic_img_size=True, **kwargs)
    path = tmp_path / "vit.pth"
    torch.save(source.state_dict(), path)
    return source.state_dict(), path


def _state_names(name: str) -> set[str]:
    """The tensors an encoding adds to each of DEPTH blocks, by their module layout."""
    model = make_vit(dynamic_img_size=True)
    before = set(model.state_dict())
    return set(attach(model, name).state_dict()) - before


@pytest.mark.parametrize("name", ["rope_mixed", "rope_axial", "relbias", "sincos2d", "none"])
def test_a_swapped_encoding_reports_its_tensors_new_and_pos_embed_dropped(tmp_path, name):
    saved, path = _pretrained(tmp_path)
    model = attach(make_vit(dynamic_img_size=True), name, checkpoint_path=path)
    report = model.attach_report
    assert isinstance(report, AttachReport) and report.source == str(path)
    assert set(report.new) == _state_names(name)
    assert report.dropped == ("pos_embed",)
    assert report.moved == {} and report.changed == () and report.resampled == {}
    if name == "rope_mixed":  # one learned frequency table per block
        assert report.new == tuple(f"blocks.{i}.attn.rotary.freqs" for i in range(DEPTH))
    state = model.state_dict()
    kept = set(state) - set(report.new)
    assert kept == set(saved) - {"pos_embed"}
    for key in kept:  # every kept tensor is the file's, bit for bit
        torch.testing.assert_close(state[key], saved[key], rtol=0, atol=0)


def test_learned_keeps_the_ape_and_reports_it_moved(tmp_path):
    saved, path = _pretrained(tmp_path, "vit_reg4")
    model = attach(make_vit("vit_reg4", dynamic_img_size=True), "learned",
                   checkpoint_path=path)
    report = model.attach_report
    assert report.new == () and report.dropped == ()
    assert report.moved == {"pos_embed": "patch_embed.pos_encoding.weight"}
    # timm's default no_embed_class=False: pos_embed has an entry for the class token and for
    # each of the 4 register tokens, which attach adds to them
    assert report.changed == ("cls_token", "reg_token")
    rows, cols = TRAIN_SIZE[0] // PATCH, TRAIN_SIZE[1] // PATCH
    pos_embed = saved["pos_embed"]
    torch.testing.assert_close(model.patch_embed.pos_encoding.weight,
                               pos_embed[0, 5:].reshape(rows, cols, -1), rtol=0, atol=0)
    torch.testing.assert_close(model.cls_token, saved["cls_token"] + pos_embed[:, :1])
    torch.testing.assert_close(model.reg_token, saved["reg_token"] + pos_embed[:, 1:5])


def test_a_pos_embed_of_another_grid_is_resampled_by_timm(tmp_path):
    saved, path = _pretrained(tmp_path)  # 4 x 4 patches
    model = attach(make_vit(dynamic_img_size=True, img_size=64), "learned",  # 8 x 8
                   checkpoint_path=path)
    report = model.attach_report
    dim = saved["pos_embed"].shape[-1]
    assert report.resampled == {"pos_embed": ((1, 1 + 16, dim), (1, 1 + 64, dim))}
    expected = resample_abs_pos_embed(saved["pos_embed"], new_size=(8, 8), old_size=(4, 4),
                                      num_prefix_tokens=1)
    torch.testing.assert_close(model.patch_embed.pos_encoding.weight,
                               expected[0, 1:].reshape(8, 8, dim))
    assert isinstance(model.patch_embed.pos_encoding, Learned2D)


def test_a_head_of_other_classes_is_new_and_the_file_s_dropped(tmp_path, caplog):
    saved, path = _pretrained(tmp_path)  # 5 classes
    model = attach(make_vit(dynamic_img_size=True, num_classes=3), "rope_mixed",
                   checkpoint_path=path)
    report = model.attach_report
    assert set(report.new) == {"head.weight", "head.bias"} | _state_names("rope_mixed")
    assert set(report.dropped) == {"head.weight", "head.bias", "pos_embed"}
    assert model.head.weight.shape == (3, saved["head.weight"].shape[1])
    assert "head does not fit" in caplog.text


def test_a_file_without_head_leaves_it_new(tmp_path):
    source = make_vit(dynamic_img_size=True, num_classes=0)  # a feature extractor's weights
    path = tmp_path / "features.pth"
    torch.save(source.state_dict(), path)
    model = attach(make_vit(dynamic_img_size=True), "rope_axial", checkpoint_path=path)
    assert set(model.attach_report.new) == {"head.weight", "head.bias"}
    assert model.attach_report.dropped == ("pos_embed",)


def test_without_a_file_the_report_is_relative_to_the_model():
    model = attach(make_vit(dynamic_img_size=True), "relbias")
    assert model.attach_report.source == "model"
    assert model.attach_report.new == tuple(f"blocks.{i}.attn.bias.table" for i in range(DEPTH))
    assert model.attach_report.dropped == ("pos_embed",)
    assert "new ['blocks.0.attn.bias.table', 'blocks.1.attn.bias.table'], dropped " \
           "['pos_embed']" in str(model.attach_report)


def test_a_file_of_other_sizes_or_architecture_is_refused_naming_the_tensors(tmp_path):
    _, path = _pretrained(tmp_path, embed_dim=96)  # vit_tiny: 192, 3 heads
    with pytest.raises(ValueError, match=r"checkpoint_path=.*does not fit the model's sizes.*"
                                         r"blocks.0.attn.proj.bias \(96,\) vs \(192,\), .* "
                                         r"and 24 more$"):
        attach(make_vit(dynamic_img_size=True), "rope_mixed", checkpoint_path=path)
    torch.save({**make_vit().state_dict(), "extra.weight": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match=r"holds tensors this VisionTransformer does not have: "
                                         r"\['extra.weight'\]"):
        attach(make_vit(dynamic_img_size=True), "rope_mixed", checkpoint_path=path)
    state = make_vit().state_dict()
    del state["blocks.1.mlp.fc2.weight"]
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"lacks tensors of the model: "
                                         r"\['blocks.1.mlp.fc2.weight'\]"):
        attach(make_vit(dynamic_img_size=True), "rope_mixed", checkpoint_path=path)


@pytest.mark.parametrize("content, match", [(None, "is not a file"),
                                            (b"not a torch file", "is not a readable timm state"),
                                            ([1, 2], "is not a readable timm state"),
                                            ({"step": 3}, "does not hold a state dict")])
def test_a_path_that_is_not_a_weights_file_is_named(tmp_path, content, match):
    path = tmp_path / "w.pth"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        torch.save(content, path)
    with pytest.raises(ValueError, match=rf"checkpoint_path='{path}' {match}"):
        attach(make_vit(dynamic_img_size=True), "rope_mixed", checkpoint_path=path)


def test_an_unknown_encoding_is_refused_before_the_file_is_read(tmp_path, monkeypatch):
    _, path = _pretrained(tmp_path)

    def read(*args, **kwargs):
        pytest.fail("the weights file was read")

    monkeypatch.setattr(timm.models, "load_state_dict", read)
    with pytest.raises(ValueError, match="rope_nope"):
        attach(make_vit(dynamic_img_size=True), "rope_nope", checkpoint_path=path)


@pytest.mark.parametrize("family", ["vit", "vit_reg4", "deit"])
def test_timm_state_dict_loads_strictly_into_timm_with_the_same_function(family):
    model = attach(make_vit(family, dynamic_img_size=True), "learned")
    with torch.no_grad():  # a trained table, not the copy of timm's initialization
        model.patch_embed.pos_encoding.weight.normal_()
    plain = make_vit(family, dynamic_img_size=True)
    plain.load_state_dict(timm_state_dict(model), strict=True)
    images = torch.randn(2, 3, *TRAIN_SIZE)
    torch.testing.assert_close(plain.eval()(images), model.eval()(images))


def test_timm_state_dict_refuses_encodings_timm_has_no_place_for():
    with pytest.raises(ValueError, match="needs a model attached with 'learned'.*rotary"):
        timm_state_dict(attach(make_vit(), "rope_mixed"))
    with pytest.raises(ValueError, match="needs a model attached with 'learned'.*SinCos2D"):
        timm_state_dict(attach(make_vit(), "sincos2d"))
    with pytest.raises(TypeError, match="attached by posenc.spatial.attach"):
        timm_state_dict(make_vit())


def test_every_name_loads_from_a_file(tmp_path):
    _, path = _pretrained(tmp_path)
    for name in ENCODINGS:
        model = attach(make_vit(dynamic_img_size=True), name, checkpoint_path=path)
        report = model.attach_report
        assert set(report.new) == (set() if name == "learned" else _state_names(name)), name
        model(torch.randn(1, 3, 48, 40))  # runs at another size


def test_a_lightning_checkpoint_is_not_a_timm_file_and_the_names_are_few(tmp_path):
    """An ImageClassifier checkpoint's weights sit under ``model.``: refused, six names shown."""
    model = make_vit()
    path = tmp_path / "lightning.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, path)
    count = len(model.state_dict())
    with pytest.raises(ValueError, match=rf"does not have: \['model\.blocks\.0\.[^]]*\] and "
                                         rf"{count - 6} more \(another architecture"):
        attach(make_vit(dynamic_img_size=True), "rope_mixed", checkpoint_path=path)


# Token layouts of the same ViT: (make_vit kwargs, how the refusal describes it).
NO_CLASS = {"class_token": False, "global_pool": "avg", "fc_norm": False}
LAYOUTS = {
    "class": ({}, r"1 prefix token \(a class token, 0 register tokens\), no_embed_class=False"),
    "no_class": (NO_CLASS, r"0 prefix tokens \(no class token, 0 register tokens\)"),
    "no_embed_class": ({"no_embed_class": True},
                       r"1 prefix token \(a class token, 0 register tokens\), no_embed_class=True"),
    "registers": ({"reg_tokens": 4},
                  r"5 prefix tokens \(a class token, 4 register tokens\), no_embed_class=False"),
}


@pytest.mark.parametrize("source, target", [
    ("no_class", "class"), ("no_embed_class", "class"), ("class", "no_class"),
    ("class", "no_embed_class"), ("class", "registers"), ("registers", "no_embed_class")])
@pytest.mark.parametrize("name", ["rope_axial", "learned"])
def test_a_file_of_another_token_layout_is_refused_naming_both(tmp_path, source, target, name):
    (source_kwargs, source_layout), (target_kwargs, target_layout) = LAYOUTS[source], \
        LAYOUTS[target]
    path = tmp_path / "vit.pth"
    saved = make_vit(dynamic_img_size=True, **source_kwargs).state_dict()
    torch.save(saved, path)
    entries = saved["pos_embed"].shape[1]
    model = make_vit(dynamic_img_size=True, **target_kwargs)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf"^checkpoint_path='{path}' was saved from a ViT with "
                                         rf"{source_layout} \(pos_embed of {entries} entries\); "
                                         rf"the model has {target_layout}"):
        attach(model, name, checkpoint_path=path)
    after = model.state_dict()  # refused before anything was loaded
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
