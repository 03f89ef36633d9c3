# What the `testbed` command's groups share: the top-level click group, error handling
# (exit codes), and the options several commands take.

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from testbed.errors import InputError, TestbedError
from testbed.progress import err_console


def exit_code_of(exc: BaseException) -> int:
    # escape: messages quote user input ("[campaign]", "cluster=[...]"), not markup
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return 2 if isinstance(exc, InputError) else 1


def handled(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn testbed errors into a one-line message and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TestbedError as exc:
            sys.exit(exit_code_of(exc))
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted; torn down[/]")
            sys.exit(130)

    return wrapper


def hosts_option(value: str | None) -> int | list[str] | None:
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise click.BadParameter(
            "expected a host count (32) or a comma-separated list of node names (n3,n17)"
        )
    return names


def topology_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--hosts, --pick, --seed, --scale, --clamp, --out: how a topology becomes a network."""
    options = [
        click.option(
            "--hosts",
            "hosts",
            metavar="N|NAMES",
            help="Host count (the first N nodes, or a sample with --pick random), or a comma-separated list of node names.",
        ),
        click.option(
            "--pick",
            type=click.Choice(["first", "random"]),
            default="first",
            show_default=True,
            help="Which N nodes to emulate.",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed for --pick random, loss and jitter.",
        ),
        click.option(
            "--scale",
            type=float,
            default=1.0,
            show_default=True,
            help="Multiply every latency by this.",
        ),
        click.option(
            "--clamp",
            is_flag=True,
            help="Raise latencies below the engine's measured floor to it (else they are an error).",
        ),
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Run folder (default runs/<name>-<timestamp>).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


# The benchmarks raise RTTs below the floor to it by default (and count them).
no_clamp_option = click.option(
    "--no-clamp",
    is_flag=True,
    help="Refuse RTTs below the delay engine's floor instead of raising them to it "
    "(clamping is the default here; the result counts clamped pairs).",
)


run_folder_option = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run folder (default runs/<name>-<timestamp>).",
)


def overrides_option(example: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--set KEY=VALUE (repeatable): a spec field by dotted path, a TOML value."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Override a spec field (dotted path; TOML value), {example}.",
    )


def _ray_address(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from testbed.spec import cluster_address_problem

    if value is not None and (why := cluster_address_problem(value)):
        raise click.BadParameter(why, ctx=ctx, param=param)
    return value


ray_option = click.option(
    "--ray",
    "ray",
    is_flag=False,
    flag_value="local",
    default=None,
    metavar="[ADDRESS]",
    callback=_ray_address,
    help="Run as Ray tasks: on a Ray cluster of this machine started for the command "
    "(no ADDRESS), or on the cluster at ADDRESS (auto, HOST:PORT, ray://HOST:PORT).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="p2p-grid-testbed")
def cli() -> None:
    """P2P Grid Testbed: real peers in network namespaces on a WAN core that
    delays every packet by its pair's latency from a real matrix.

    TOPOLOGY is planetlab, planetlab:<frame 1-18>, sharcnet[:<seed>], a matrix
    file (N x N RTT in ms) or a topology .toml.
    """


# -- up ----------------------------------------------------------------------------------------------
