//! Every request the store makes to the object store: its label in the metrics and the S3
//! permission it needs. `deploy/ec2/iam-policy.json` grants exactly these permissions
//! (`tests/tests/integration/deploy.rs` compares them), so a new kind of request cannot ship without the
//! policy that lets it run.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put,
    PutMultipart,
    PutPart,
    CompleteMultipart,
    AbortMultipart,
    Get,
    Head,
    List,
    Delete,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Put,
        Op::PutMultipart,
        Op::PutPart,
        Op::CompleteMultipart,
        Op::AbortMultipart,
        Op::Get,
        Op::Head,
        Op::List,
        Op::Delete,
    ];

    /// The `op` label of the store's metrics.
    pub fn label(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutMultipart => "put_multipart",
            Op::PutPart => "put_part",
            Op::CompleteMultipart => "complete_multipart",
            Op::AbortMultipart => "abort_multipart",
            Op::Get => "get",
            Op::Head => "head",
            Op::List => "list",
            Op::Delete => "delete",
        }
    }

    /// The IAM action S3 authorizes the request with (AWS's list of actions for Amazon S3:
    /// the multipart steps are PutObject's, HEAD is GetObject's, listing is the bucket's
    /// ListBucket).
    pub fn s3_action(self) -> &'static str {
        match self {
            Op::Put | Op::PutMultipart | Op::PutPart | Op::CompleteMultipart => "s3:PutObject",
            Op::AbortMultipart => "s3:AbortMultipartUpload",
            Op::Get | Op::Head => "s3:GetObject",
            Op::List => "s3:ListBucket",
            Op::Delete => "s3:DeleteObject",
        }
    }
}
