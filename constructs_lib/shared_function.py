"""Every Lambda function of an app from one code asset, hardened the same way.

No Docker: the asset holds the Python package directory itself (e.g. ``app/``), exactly its
``.py`` files (an include list), so a handler string reads ``app.orders.handler``, imports are the
same in tests and in Lambda, and no local file (``.env``, caches, notes) ever ships. Where the
synthesizing machine has a Python of the runtime's version, the asset also holds their bytecode,
compiled there (:mod:`constructs_lib.bytecode`), so a cold start does not compile the app.
Third-party code comes from the official Powertools layer, whose ARN is resolved at deploy time
from its public SSM parameter; boto3 comes from the runtime.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import cast

from aws_cdk import Acknowledgment, Annotations, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from constructs_lib import bytecode
from constructs_lib.nag_findings import acknowledge_grant, acknowledge_policy, kms_grant_findings, resource_finding
from constructs_lib.validation import PropErrors, is_unresolved

#: Newest Python runtime the pinned aws-cdk-lib knows; the code also runs on Python 3.11.
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
#: The version this library was tested with, for an app that synthesizes without Powertools installed.
_TESTED_POWERTOOLS_VERSION = "3.37.0"


def _installed_powertools_version() -> str:
    try:
        return metadata.version("aws-lambda-powertools")
    except metadata.PackageNotFoundError:
        return _TESTED_POWERTOOLS_VERSION


#: The installed version (requirements.txt pins it), so the layer matches what the tests ran.
POWERTOOLS_VERSION = _installed_powertools_version()

_HANDLER = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+$")


def powertools_parameter_name(version: str = POWERTOOLS_VERSION) -> str:
    """The public SSM parameter that holds the Powertools layer ARN for this runtime and architecture."""
    # jsii returns a new proxy per access, so compare names, never the objects.
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{version}"


def package_files(package_dir: Path) -> list[Path]:
    """The files the code asset holds: the package's ``.py`` files, paths relative to its parent.

    An include list: no dotfile or dot directory (``.env``, ``.git``), no ``__pycache__``, nothing
    that is not Python source, so neither local state nor secrets reach a function.
    """
    found = []
    for path in package_dir.rglob("*.py"):
        relative = path.relative_to(package_dir.parent)
        if path.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            found.append(relative)
    return sorted(found)


def _staged(package_dirs: Sequence[Path], compiler: str | None = None) -> Path:
    """A directory that holds exactly the :func:`package_files` of each package, named by their content hash.

    With ``compiler`` (an interpreter of the runtime's version) it also holds their bytecode.
    Its content (so CDK's asset hash) changes only when a Python file of one of the packages does,
    or bytecode is added or left out.
    """
    files = sorted(
        (relative, package_dir.parent) for package_dir in package_dirs for relative in package_files(package_dir)
    )
    digest = hashlib.sha256()
    for relative, parent in files:
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update((parent / relative).read_bytes() + b"\0")
    names = "+".join(package_dir.name for package_dir in package_dirs)
    compiled = f"-{RUNTIME.name.replace('.', '')}" if compiler else ""
    root = Path(tempfile.gettempdir()) / f"lambda-code-{names}-{digest.hexdigest()[:24]}{compiled}"
    if root.is_dir():
        return root
    building = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=root.parent))
    for relative, parent in files:
        (building / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(parent / relative, building / relative)
    if compiler:
        try:
            bytecode.compile_tree(compiler, building)
        except bytecode.BytecodeError:
            shutil.rmtree(building, ignore_errors=True)
            raise
    try:
        os.rename(building, root)
    except OSError:  # another synth staged the same content first
        shutil.rmtree(building, ignore_errors=True)
    return root


class LambdaCode:
    """The single code asset: one Python package directory and those it ships with, shared by every function."""

    _ATTRIBUTE = "_shared_lambda_code"

    @classmethod
    def package(cls, scope: Construct, package_dir: Path, *, with_packages: Sequence[Path] = ()) -> lambda_.Code:
        """Code for a package directory; the asset root holds the package folder itself.

        ``with_packages`` are further package directories placed beside it at the asset root (a
        package the handlers import that is not inside ``package_dir``, e.g. one the stacks share
        with them); defaults to none. The asset is built from an include list
        (:func:`package_files`), never by excluding what happens to lie around. CDK binds a
        ``Code`` to one stack, so there is one per stack and set of directories; every one has the
        same content hash, so the assembly stages the asset once.
        """
        dirs = tuple(path.resolve() for path in (package_dir, *with_packages))
        errors = PropErrors(scope)
        for path in dirs:
            errors.check((path / "__init__.py").is_file(), f"{path} is not a Python package (no __init__.py)")
        names = [path.name for path in dirs]
        errors.check(
            len(set(names)) == len(names),
            f"the packages of one code asset need distinct names (given {', '.join(names)})",
        )
        stack = Stack.of(scope)
        cache: dict[tuple[Path, ...], lambda_.Code] = getattr(stack, cls._ATTRIBUTE, None) or {}
        if dirs not in cache:
            compiler = bytecode.bytecode_python(RUNTIME.name)
            if compiler is None and not bytecode.turned_off():
                Annotations.of(stack).add_info(
                    f"Lambda code ships as sources only: no Python {RUNTIME.name.removeprefix('python')} here to "
                    f"compile its bytecode, so each cold start compiles the modules it imports "
                    f"(name one in {bytecode.ENVIRONMENT_VARIABLE})"
                )
            cache[dirs] = lambda_.Code.from_asset(str(_staged(dirs, compiler)))
            setattr(stack, cls._ATTRIBUTE, cache)
        return cache[dirs]


class SharedFunction(Construct):
    """A Lambda function from the shared package asset, hardened the same way as every other.

    Example::

        fn = SharedFunction(self, "OrdersApi", code_root=Path("app"),
                            handler="app.orders.handler",
                            environment={"TABLE_NAME": table.table_name},
                            log_retention=logs.RetentionDays.ONE_WEEK)
        table.grant_read_write_data(fn)

    What every function gets: the newest Python runtime the pinned CDK knows, arm64, X-Ray
    active tracing, JSON structured logs into its own log group with a retention, the official
    Powertools layer pinned to the installed version, an explicit timeout and memory size, a
    role with no managed policies, and (for asynchronous invocations) a failure destination
    when ``on_failure`` is given.

    Args:
        code_root: directory of the Python package that holds every handler (e.g. ``app``).
        with_packages: further package directories shipped beside ``code_root`` in the same
            asset, for code the handlers import from outside their package (e.g. a package of
            names the stacks share with them). Defaults to none.
        handler: dotted ``package.module.function``; validated against ``code_root``.
        service_name: Powertools service name (logs, metrics, traces). Defaults to the construct id.
        description: function description. Defaults to the handler string.
        environment: environment variables, passed explicitly. Defaults to none beyond Powertools'.
        timeout: defaults to 30 seconds.
        memory_size: MB; defaults to 256.
        log_retention: retention of the function's log group. Defaults to one week.
        log_encryption_key: KMS key for the log group. Defaults to CloudWatch Logs' own encryption.
        log_removal_policy: defaults to DESTROY (logs age out by retention anyway).
        reserved_concurrent_executions: defaults to unreserved.
        on_failure: SQS queue that receives failed asynchronous invocations. Defaults to none
            (the function is not invoked asynchronously).
        retry_attempts: retries of a failed asynchronous invocation, 0..2. Defaults to 2.
        powertools_layer: layer that provides Powertools. Defaults to the official public layer
            for ``POWERTOOLS_VERSION``, resolved at deploy time through its SSM parameter.
        metrics_namespace: Powertools metrics namespace. Defaults to ``service_name``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code_root: Path,
        handler: str,
        with_packages: Sequence[Path] = (),
        service_name: str | None = None,
        description: str | None = None,
        environment: Mapping[str, str] | None = None,
        timeout: Duration | None = None,
        memory_size: int = 256,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_WEEK,
        log_encryption_key: kms.IKey | None = None,
        log_removal_policy: RemovalPolicy = RemovalPolicy.DESTROY,
        reserved_concurrent_executions: int | None = None,
        on_failure: sqs.IQueue | None = None,
        retry_attempts: int = 2,
        powertools_layer: lambda_.ILayerVersion | None = None,
        metrics_namespace: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        memory_size, retry_attempts = _checked(PropErrors(self), code_root, handler, memory_size, retry_attempts)
        timeout = timeout or Duration.seconds(30)
        service = service_name or construct_id
        #: The queue that receives failed asynchronous invocations, when one was given.
        self.on_failure: sqs.IQueue | None = on_failure

        self.log_group: logs.LogGroup = logs.LogGroup(
            self,
            "LogGroup",
            retention=log_retention,
            encryption_key=log_encryption_key,
            removal_policy=log_removal_policy,
        )
        self.role: iam.Role = iam.Role(
            self,
            "ServiceRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of {handler}",
        )
        self.log_group.grant_write(self.role)
        layer = powertools_layer or _powertools_layer(self)

        env = {
            "POWERTOOLS_SERVICE_NAME": service,
            "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace or service,
            "POWERTOOLS_LOG_LEVEL": "INFO",
            **(environment or {}),
        }
        self.function: lambda_.Function = lambda_.Function(
            self,
            "Resource",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=LambdaCode.package(self, code_root, with_packages=with_packages),
            handler=handler,
            description=description or handler,
            environment=env,
            timeout=timeout,
            memory_size=memory_size,
            role=self.role,
            layers=[layer],
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            reserved_concurrent_executions=reserved_concurrent_executions,
            on_failure=destinations.SqsDestination(on_failure) if on_failure else None,
            retry_attempts=retry_attempts if on_failure else None,
        )
        if on_failure is not None and on_failure.encryption_master_key is not None:
            # The destination's send grant names the queue key's GenerateDataKey*/ReEncrypt*.
            acknowledge_policy(self.role, kms_grant_findings("its encrypted on-failure queue"))
        self._enable_tracing()

    def _enable_tracing(self) -> None:
        # X-Ray's write actions cannot be scoped to a resource. CDK's `tracing=ACTIVE` would put
        # them into the role's default policy next to the function's scoped grants, where one cdk-nag
        # acknowledgement would hide any other wildcard; a policy of their own keeps the
        # acknowledgement to exactly these two actions.
        cfn = cast(lambda_.CfnFunction, self.function.node.default_child)
        cfn.tracing_config = lambda_.CfnFunction.TracingConfigProperty(mode="Active")
        policy = iam.Policy(
            self,
            "TracingPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
                    resources=["*"],
                )
            ],
        )
        policy.attach_to_role(self.role)
        self.function.node.add_dependency(policy)
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level "
                "permissions; this policy holds only those two actions.",
            )
        )

    @property
    def function_name(self) -> str:
        return self.function.function_name

    def add_environment(self, key: str, value: str) -> None:
        """Add one environment variable after creation (for values known only later)."""
        self.function.add_environment(key, value)

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a principal invoke the function (and its versions and aliases, as CDK's grant names them)."""
        grant = self.function.grant_invoke(grantee)
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            finding = resource_finding(principal, self.function.function_arn, ":*", owner=self.function)
            reason = "lambda:InvokeFunction on '<arn>:*' covers this one function's versions and aliases."
            acknowledge_grant(grantee, {finding: reason})
        return grant


def _checked(
    errors: PropErrors, code_root: Path, handler: str, memory_size: int, retry_attempts: int
) -> tuple[int, int]:
    """The memory size and async retry count, each out-of-range one recorded (with the fix) and defaulted."""
    errors.check(*_check_handler(code_root, handler))
    if not errors.check(
        is_unresolved(memory_size) or 128 <= memory_size <= 10240,
        f"memory_size must be 128..10240 MB (given {memory_size})",
    ):
        memory_size = 256
    if not errors.check(
        is_unresolved(retry_attempts) or 0 <= retry_attempts <= 2,
        f"retry_attempts must be 0..2 (given {retry_attempts})",
    ):
        retry_attempts = 2
    return memory_size, retry_attempts


def _check_handler(code_root: Path, handler: str) -> tuple[bool, str]:
    """Whether ``handler`` names a module inside ``code_root``, and what to fix when it does not."""
    if not _HANDLER.fullmatch(handler):
        return False, f"handler must be a dotted path like 'pkg.module.function' (given {handler!r})"
    module, _, _function = handler.rpartition(".")
    parts = module.split(".")
    if parts[0] != code_root.name:
        return False, f"handler {handler!r} must live in the {code_root.name!r} package"
    path = code_root.joinpath(*parts[1:])
    if not path.with_suffix(".py").is_file() and not (path / "__init__.py").is_file():
        return False, f"handler {handler!r}: no module {path.with_suffix('.py')}"
    return True, ""


def _powertools_layer(scope: Construct) -> lambda_.ILayerVersion:
    """The official Powertools layer, one per stack, its ARN read from public SSM at deploy time."""
    stack = Stack.of(scope)
    layer_id = "PowertoolsLayer"
    existing = stack.node.try_find_child(layer_id)
    if existing is not None:
        return existing  # type: ignore[return-value]
    arn = ssm.StringParameter.value_for_string_parameter(stack, powertools_parameter_name())
    return lambda_.LayerVersion.from_layer_version_arn(stack, layer_id, arn)
