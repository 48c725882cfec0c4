"""``unitta/methods/norm/row_mask.py``: ``masked_rows`` reaches the layers of type ``RowMaskedNorm`` and no other."""

import torch
from torch import nn

from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.norm.robust_bn_layer import RobustBN
from unitta.methods.norm.row_mask import RowMaskedNorm, masked_rows
from unitta.methods.norm.unmixtns_layer import UnMixTNS2d


def test_masked_rows_sets_the_mask_of_row_masked_layers_only() -> None:
    model = nn.Sequential(BatchStatsNorm(nn.BatchNorm2d(3)), nn.BatchNorm2d(3))
    model[1].row_mask = "untouched"  # an attribute of that name does not make a layer a masked one
    mask = torch.tensor([True, False])
    with masked_rows(model, mask):
        assert model[0].row_mask is mask and model[1].row_mask == "untouched"
    assert model[0].row_mask is None and model[1].row_mask == "untouched"
    assert all(issubclass(kind, RowMaskedNorm) for kind in (BatchStatsNorm, RobustBN, UnMixTNS2d))
