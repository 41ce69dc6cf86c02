//! The Iceberg crate's file I/O over the broker's own object store client: tables live in the
//! same bucket (or directory) as the remote tier, under the same credentials, retries and
//! request metrics, and no second S3 client is built.
//!
//! Iceberg names files by full URI ([`Store::uri`]); a URI outside the store is refused, so a
//! metadata file cannot make the broker read or delete anything but its own objects.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use strata_objstore::{ObjStoreError, Store};

/// A [`FileIO`] whose every path is an object of `store`.
pub fn file_io(store: Store) -> FileIO {
    FileIOBuilder::new(Arc::new(ObjectStorage { store })).build()
}

/// The storage and its factory in one: the factory hands out itself.
#[derive(Clone)]
pub struct ObjectStorage {
    store: Store,
}

impl std::fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectStorage({})", self.store)
    }
}

// The crate's traits are serializable so that a storage can cross a process boundary; this one
// holds a live client and never does. It serializes as its root and refuses to deserialize.
impl serde::Serialize for ObjectStorage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.store.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for ObjectStorage {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> std::result::Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a broker object storage cannot be deserialized",
        ))
    }
}

#[typetag::serde]
impl StorageFactory for ObjectStorage {
    fn build(&self, _: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.clone()))
    }
}

fn io_error(e: ObjStoreError, path: &str) -> Error {
    let kind = match e {
        ObjStoreError::NotFound { .. } => ErrorKind::DataInvalid,
        _ => ErrorKind::Unexpected,
    };
    let retriable = e.is_retriable();
    let err = Error::new(kind, format!("object store, {path}: {e}"));
    if retriable {
        err.with_retryable(true)
    } else {
        err
    }
}

impl ObjectStorage {
    fn key(&self, path: &str) -> Result<String> {
        self.store.key_of_uri(path).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("{path} is outside the object store {}", self.store),
            )
        })
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(ObjStoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_error(e, path)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let info = (self.store.head(&self.key(path)?).await).map_err(|e| io_error(e, path))?;
        Ok(FileMetadata { size: info.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        (self.store.get(&self.key(path)?).await).map_err(|e| io_error(e, path))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(Reader {
            store: self.store.clone(),
            key: self.key(path)?,
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        (self.store.put(&self.key(path)?, bs).await).map_err(|e| io_error(e, path))
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(Writer {
            store: self.store.clone(),
            key: self.key(path)?,
            buf: BytesMut::new(),
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        (self.store.delete(&self.key(path)?).await).map_err(|e| io_error(e, path))
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let prefix = self.key(path)?;
        let objects = (self.store.list(&prefix).await).map_err(|e| io_error(e, path))?;
        for o in objects {
            (self.store.delete(&o.key).await).map_err(|e| io_error(e, &o.key))?;
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        self.key(path)?;
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        self.key(path)?;
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

struct Reader {
    store: Store,
    key: String,
}

#[async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        (self.store.get_range(&self.key, range).await).map_err(|e| io_error(e, &self.key))
    }
}

/// Collects a file and puts it whole on close (multipart above the store's threshold): a data
/// file is bounded by the translator's target size, so its bytes are bounded too, and an
/// object appears complete or not at all.
struct Writer {
    store: Store,
    key: String,
    buf: BytesMut,
    closed: bool,
}

#[async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::Unexpected, "write after close"));
        }
        self.buf.extend_from_slice(&bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::Unexpected, "closed twice"));
        }
        self.closed = true;
        let body = std::mem::take(&mut self.buf).freeze();
        (self.store.put(&self.key, body).await).map_err(|e| io_error(e, &self.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_round_trip_through_the_store_and_foreign_uris_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let store = Store::open(&strata_objstore::StoreConfig::new(url.clone())).unwrap();
        let io = file_io(store);
        let path = format!("{url}/wh/t/metadata/v1.json");
        let out = io.new_output(&path).unwrap();
        let mut w = out.writer().await.unwrap();
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        assert!(!io.exists(&path).await.unwrap(), "visible only once closed");
        w.close().await.unwrap();
        assert!(w.close().await.is_err());
        let input = io.new_input(&path).unwrap();
        assert_eq!(
            input.read().await.unwrap(),
            Bytes::from_static(b"hello world")
        );
        assert_eq!(input.metadata().await.unwrap().size, 11);
        let r = input.reader().await.unwrap();
        assert_eq!(r.read(6..11).await.unwrap(), Bytes::from_static(b"world"));
        io.delete_prefix(format!("{url}/wh/t")).await.unwrap();
        assert!(!io.exists(&path).await.unwrap());
        for foreign in ["s3://elsewhere/x", "file:///etc/passwd", "/etc/passwd"] {
            assert!(io.new_input(foreign).is_err(), "{foreign}");
        }
    }
}
