"""One small typed loader per CloudFormation resource type: template properties -> moto API calls.

Each loader receives the resource's *resolved* properties and returns a ``Deployed`` with the
physical id (what ``Ref`` returns) and the ``Fn::GetAtt`` attributes. Physical names that the
template leaves to CloudFormation are generated the way CloudFormation does
(``<stack>-<LogicalId>-<SUFFIX>``), deterministically so that runs are comparable.

Why not moto's CloudFormation ``create_stack``: moto's CloudFormation parser skips resource types
it does not know without an error, needs the CDK asset bucket and the Powertools SSM parameter
to exist, validates Lambda layers it cannot have, and creates event source mappings that make
moto invoke functions synchronously on every write (bypassing the batching, partial-failure and
DLQ semantics the pumps emulate). The loaders below are small and explicit instead; a resource
type with behaviour and no loader fails the deployment with its name.

This package's face is what the deployment and the services use: the registry of loaders by type
(``LOADERS``, filled by ``@loader``), the ``Cloud`` a deployment writes to and what the harness keeps
beside moto (``base``). The loaders themselves live by service family, each module registering its
own when imported (all are imported here):

- ``security``: KMS keys and aliases, IAM roles and every policy resource, Secrets Manager secrets;
- ``storage``: DynamoDB tables, S3 buckets, SSM parameters, log groups;
- ``messaging``: SQS queues, SNS topics and subscriptions, SES, EventBridge buses, rules and archives;
- ``users``: Cognito user pools, their clients and groups;
- ``analytics``: Firehose delivery streams, the Glue Data Catalog, Athena;
- ``functions``: Lambda functions, event source mappings, async invoke configs, versions, aliases;
- ``workflows``: Step Functions state machines;
- ``bedrock``: Bedrock guardrails and their versions (the Bedrock stub screens calls with them);
- ``apis``: API Gateway REST and V2 APIs and their children (the routers read the template).
"""

from embedded.cloudformation.loaders import (  # noqa: F401 - imported for the loaders they register
    analytics,
    apis,
    bedrock,
    functions,
    messaging,
    security,
    storage,
    users,
    workflows,
)
from embedded.cloudformation.loaders.base import (
    LOADERS,
    PASSIVE_TYPES,
    AsyncConfig,
    Cloud,
    EventSourceMapping,
    Loader,
    Registry,
    RuleTarget,
    is_passive,
    loader,
    physical_name,
)

__all__ = [
    "LOADERS",
    "PASSIVE_TYPES",
    "AsyncConfig",
    "Cloud",
    "EventSourceMapping",
    "Loader",
    "Registry",
    "RuleTarget",
    "is_passive",
    "loader",
    "physical_name",
]
