"""Test and benchmark support for unipool; never imported by the package."""
