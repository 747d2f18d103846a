"""Fill /wheels with wheels of everything the image installs, except the project itself: its
dependencies (pyproject.toml at /pyproject.toml, with the extras named by argv[1]) and what builds
its wheel. Run by `make image` with the base image's own Python, so that each environment marker
(`python_full_version < "3.11.3"`, say) is decided as it will be in the image; the image build then
installs from /wheels alone, with no network.
"""

import subprocess
import sys
import tomllib
import venv


def requirements(extras: list[str]) -> list[str]:
    """What builds the wheel, what it depends on, and what the extras add."""
    with open("/pyproject.toml", "rb") as file:
        pyproject = tomllib.load(file)
    project, optional = pyproject["project"], pyproject["project"]["optional-dependencies"]
    return [*pyproject["build-system"]["requires"], *project["dependencies"],
            *(line for extra in extras for line in optional[extra])]


def main() -> None:
    wanted = requirements(sys.argv[1].split(","))
    venv.create("/tmp/pip", with_pip=True)
    subprocess.run(["/tmp/pip/bin/pip", "wheel", "--quiet", "--disable-pip-version-check",
                    "--wheel-dir", "/wheels", *wanted], check=True)


if __name__ == "__main__":
    main()
