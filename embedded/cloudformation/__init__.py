"""CloudFormation on moto: the cloud assembly, intrinsics, one loader per resource type, deployment."""
