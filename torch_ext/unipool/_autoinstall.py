"""Imported at interpreter start by unipool_install.pth when UNIPOOL_INSTALL=1."""
import os
import sys

try:
    from unipool.torch import install

    install(os.environ.get("UNIPOOL_DEVICE_CONF", ""), os.environ.get("UNIPOOL_HOST_CONF", ""))
except Exception as e:  # never break interpreter start-up; say why
    print(f"unipool: UNIPOOL_INSTALL=1 but install() failed: {e}", file=sys.stderr)
