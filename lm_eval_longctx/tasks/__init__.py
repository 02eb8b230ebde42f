"""Harness task classes (thin ConfigurableTask subclasses); importing one installs the glue."""
