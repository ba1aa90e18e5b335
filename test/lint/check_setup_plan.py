"""scripts/setup.sh --plan against this machine's real dpkg/apt/pip: every
package the script manages that dpkg (or pip) reports installed must be absent
from the plan, every missing one present, every plan line must install a
package (never add a source), and the script must not name an outside host."""
import pathlib
import re
import subprocess
import sys

repo = pathlib.Path(sys.argv[1])
script = repo / "scripts" / "setup.sh"
text = script.read_text()


def listed(var):
    m = re.search(var + r"=\(([^)]*)\)", text)
    if not m:
        sys.exit(f"setup.sh has no {var}=(...) list")
    return m.group(1).split()


apt, pip = listed("APT_PACKAGES"), listed("PIP_PACKAGES")
plan = subprocess.run([str(script), "--plan"], capture_output=True, text=True)
if plan.returncode != 0:
    sys.exit(f"setup.sh --plan exited {plan.returncode}: {plan.stderr}")
planned = set()
for line in plan.stdout.splitlines():
    kind, _, name = line.partition(" ")
    if kind not in ("apt", "pip") or not name or " " in name:
        sys.exit(f"setup.sh --plan printed a line that installs no package: {line!r}")
    planned.add((kind, name))

errors = []
for pkg in apt:
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    installed = status.returncode == 0 and status.stdout == "install ok installed"
    if installed == (("apt", pkg) in planned):
        errors.append(f"apt {pkg}: dpkg says {'installed' if installed else 'not installed'}, "
                      f"plan says {'install' if ('apt', pkg) in planned else 'nothing'}")
for pkg in pip:
    installed = subprocess.run(["python3", "-m", "pip", "show", "-q", pkg],  # the python3 setup.sh uses
                               capture_output=True).returncode == 0
    if installed == (("pip", pkg) in planned):
        errors.append(f"pip {pkg}: pip says {'installed' if installed else 'not installed'}, "
                      f"plan disagrees")
for bad in ("sources.list", "apt-key", "http://", "https://", "wget", "curl "):
    if bad in text:
        errors.append(f"setup.sh mentions {bad!r}: it must install only from the configured sources")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"setup plan agrees with dpkg/pip on {len(apt)} apt and {len(pip)} pip packages; "
      f"{len(planned)} to install")
