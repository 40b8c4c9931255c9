"""The lowest layer: what every app may import (errors of the contract)."""
