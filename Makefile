# One entry point for humans and CI. `make test` is the whole test suite.
CARGO ?= cargo

.PHONY: test lint unit quickstart echo bless

test: lint unit

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

# Regenerate the translator's golden files after an intended change.
bless:
	WEIR_BLESS=1 $(CARGO) test -p weir-translate --test golden

quickstart:
	$(CARGO) run --release -- run -c examples/quickstart

echo:
	$(CARGO) run --release -- echo
