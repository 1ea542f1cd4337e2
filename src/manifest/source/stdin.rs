//! Standard input as a source (`berth render -`), shown as `STDIN`.

use super::{counted, decode, Deferred};
use crate::manifest::bounds::Limits;
use crate::manifest::decrypt::Decryption;
use crate::manifest::error::ManifestError;
use crate::manifest::read::{read_capped, ReadError};
use crate::manifest::visitor::{Flow, Item, Visitor};

/// Standard input, shown as `STDIN`, bounded by the per-file cap.
pub struct Stdin {
    /// Size caps.
    pub limits: Limits,
    /// How a file encrypted with sops is opened; `None`: it is refused.
    pub decrypt: Option<Decryption>,
}

impl Visitor for Stdin {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let path = "STDIN".to_string();
        let (budget, mut objects) = (self.limits.budget(), 0);
        let f = &mut counted(&self.limits, &mut objects, f);
        let deferred = Deferred::new(self.decrypt.as_ref());
        match read_capped(Ok(std::io::stdin().lock()), self.limits.max_file_size) {
            Ok(bytes) => decode(path, bytes, &budget, &deferred, f)?,
            Err(ReadError::TooLarge(size)) => f(Err(ManifestError::FileTooLarge {
                path,
                size,
                limit: self.limits.max_file_size,
            }))?,
            Err(ReadError::Io(cause)) => f(Err(ManifestError::Read { path, cause }))?,
        }
        deferred.finish(&budget, f)
    }
}
