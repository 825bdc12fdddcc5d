"""pytest plugin (``-p torch_suite_patch``): ``torch.load`` goes through tensorplay
for the whole session, as ``tensorplay.patch_torch()`` makes it for a user."""
import tensorplay


def pytest_configure(config):
    tensorplay.patch_torch()
