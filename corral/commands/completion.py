"""`corral completion bash|zsh`: a completion script made from the parser itself, so
every command and option any part of the CLI adds is completed without a plugin.

    eval "$(corral completion bash)"      # in ~/.bashrc
    eval "$(corral completion zsh)"       # in ~/.zshrc
"""

from __future__ import annotations

import argparse
import shlex

from .context import Context

__all__ = ["completion_script", "completion_table", "register"]


def completion_table(parser: argparse.ArgumentParser, path: str = "corral") -> dict[str, list[str]]:
    """Command path (`corral sandboxes create`) -> the words that may follow it."""
    words: list[str] = []
    table: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                table.update(completion_table(child, f"{path} {name}"))
        else:
            words += [option for option in action.option_strings if option.startswith("--")]
    table[path] = sorted(set(words))
    return table


BASH = """# corral shell completion (bash; zsh through bashcompinit)
declare -A _corral_words=(
{entries}
)
_corral() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="corral" i w
  for ((i=1; i<COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    [[ -n "${{_corral_words[$path $w]+x}}" ]] && path="$path $w"
  done
  COMPREPLY=($(compgen -W "${{_corral_words[$path]}}" -- "$cur"))
}}
complete -o default -F _corral corral
"""


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = completion_table(parser)
    entries = "\n".join(f"  [{shlex.quote(path)}]={shlex.quote(' '.join(words))}" for path, words in sorted(table.items()))
    script = BASH.format(entries=entries)
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], root: argparse.ArgumentParser) -> None:
    def handler(ctx: Context) -> int:
        ctx.console.out.write(completion_script(root, ctx.args.shell))
        return 0

    parser = sub.add_parser("completion", help="print a shell completion script: eval \"$(corral completion bash)\"")
    parser.add_argument("shell", choices=["bash", "zsh"])
    parser.set_defaults(handler=handler)
