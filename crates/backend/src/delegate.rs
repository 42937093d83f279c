//! [`delegate_backend!`](crate::delegate_backend): how a wrapper forwards the methods of
//! [`Backend`] it does not change, and the forwarding impls for `Box<B>` and `Arc<B>`.

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::Backend;

/// Implement every method of [`Backend`](crate::backend::Backend) by forwarding it, except those listed after `except`
/// (which the wrapper writes itself, next to the macro call, in the same `#[async_trait]` impl).
/// `except storage` lists every call that reaches the storage (all but `capabilities`, `policy`,
/// `cost`, `take_written` and `record_written`), for wrappers that note or delay each of them.
///
/// The first argument names where calls go: a field of the wrapper (`inner` forwards to
/// `self.inner`), or `*` to forward through a pointer (`(**self)`, for `Box<B>` and `Arc<B>`).
/// Every method the trait has is covered, so a wrapper cannot silently fall back to a trait
/// default: it either forwards a method or lists it and implements it. Listing a method and
/// not implementing it is a compile error for required methods; the `wrappers_forward_every_method`
/// test checks the optional ones of every wrapper in this workspace.
///
/// ```
/// use std::fmt;
/// use std::sync::Arc;
/// use treesync_backend::backend::{Backend, Error};
/// use treesync_backend::{Op, source::BlobSource};
///
/// /// Logs each op, forwards everything.
/// struct Log<B>(B);
///
/// impl<B: Backend> fmt::Display for Log<B> {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         write!(f, "Log({})", self.0)
///     }
/// }
///
/// #[async_trait::async_trait]
/// impl<B: Backend> Backend for Log<B> {
///     treesync_backend::delegate_backend!(0, except execute);
///
///     async fn execute(&self, op: &Op, blobs: &Arc<dyn BlobSource>) -> Result<(), Error> {
///         eprintln!("{op:?}");
///         self.0.execute(op, blobs).await
///     }
/// }
/// ```
#[macro_export]
macro_rules! delegate_backend {
    // `except storage`: the wrapper implements every call that reaches the storage, and
    // forwards only those that describe the backend (`capabilities`, `policy`, `cost`) or hand
    // over what it noted (`take_written`, `record_written`).
    ($to:tt, except storage $(, $skip:ident)* $(,)?) => {
        $crate::delegate_backend!($to, except execute, execute_batch, prepare_target, read_dir, load_state,
            store_state, lock, unlock, scan, scan_dirs, probe, read_file, load_aux, store_aux, append_aux,
            aux_mtime $(, $skip)*);
    };
    ($to:tt $(, except $($skip:ident),+)? $(,)?) => {
        $crate::delegate_backend!(@each $to [$($($skip)+)?]
            capabilities policy execute execute_batch prepare_target read_dir load_state store_state
            lock unlock scan scan_dirs cost probe read_file load_aux store_aux append_aux aux_mtime take_written
            record_written);
    };
    (@each $to:tt $skips:tt $($m:ident)*) => {
        $( $crate::delegate_backend!(@maybe $to $m $skips); )*
    };
    // `$m` is in the list: the wrapper implements it.
    (@maybe $to:tt capabilities [capabilities $($rest:ident)*]) => {};
    (@maybe $to:tt policy [policy $($rest:ident)*]) => {};
    (@maybe $to:tt execute [execute $($rest:ident)*]) => {};
    (@maybe $to:tt execute_batch [execute_batch $($rest:ident)*]) => {};
    (@maybe $to:tt prepare_target [prepare_target $($rest:ident)*]) => {};
    (@maybe $to:tt read_dir [read_dir $($rest:ident)*]) => {};
    (@maybe $to:tt load_state [load_state $($rest:ident)*]) => {};
    (@maybe $to:tt store_state [store_state $($rest:ident)*]) => {};
    (@maybe $to:tt lock [lock $($rest:ident)*]) => {};
    (@maybe $to:tt unlock [unlock $($rest:ident)*]) => {};
    (@maybe $to:tt scan [scan $($rest:ident)*]) => {};
    (@maybe $to:tt scan_dirs [scan_dirs $($rest:ident)*]) => {};
    (@maybe $to:tt cost [cost $($rest:ident)*]) => {};
    (@maybe $to:tt probe [probe $($rest:ident)*]) => {};
    (@maybe $to:tt read_file [read_file $($rest:ident)*]) => {};
    (@maybe $to:tt load_aux [load_aux $($rest:ident)*]) => {};
    (@maybe $to:tt store_aux [store_aux $($rest:ident)*]) => {};
    (@maybe $to:tt append_aux [append_aux $($rest:ident)*]) => {};
    (@maybe $to:tt aux_mtime [aux_mtime $($rest:ident)*]) => {};
    (@maybe $to:tt take_written [take_written $($rest:ident)*]) => {};
    (@maybe $to:tt record_written [record_written $($rest:ident)*]) => {};
    (@maybe $to:tt $m:ident [$first:ident $($rest:ident)*]) => {
        $crate::delegate_backend!(@maybe $to $m [$($rest)*]);
    };
    (@maybe $to:tt $m:ident []) => {
        $crate::delegate_backend!(@emit $to $m);
    };
    (@t $s:tt *) => { (**$s) };
    (@t $s:tt $field:tt) => { $s.$field };
    // The signatures are those `#[async_trait]` gives the trait's methods; the futures of the
    // target are returned as they are (no second box).
    (@emit $to:tt capabilities) => {
        fn capabilities(&self) -> $crate::backend::Capabilities {
            $crate::delegate_backend!(@t self $to).capabilities()
        }
    };
    (@emit $to:tt policy) => {
        fn policy(&self) -> $crate::backend::Policy {
            $crate::delegate_backend!(@t self $to).policy()
        }
    };
    (@emit $to:tt take_written) => {
        fn take_written(&self) -> ::std::vec::Vec<$crate::backend::Written> {
            $crate::delegate_backend!(@t self $to).take_written()
        }
    };
    (@emit $to:tt record_written) => {
        fn record_written(&self, on: bool) {
            $crate::delegate_backend!(@t self $to).record_written(on)
        }
    };
    (@emit $to:tt append_aux) => {
        fn append_aux<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            name: &'life1 str,
            bytes: &'life2 [u8],
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, 'life2: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).append_aux(name, bytes)
        }
    };
    (@emit $to:tt aux_mtime) => {
        fn aux_mtime<'life0, 'life1, 'async_trait>(
            &'life0 self,
            name: &'life1 str,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::core::option::Option<(i64, u32)>)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).aux_mtime(name)
        }
    };
    (@emit $to:tt cost) => {
        fn cost(&self) -> ::std::vec::Vec<(&'static str, u64)> {
            $crate::delegate_backend!(@t self $to).cost()
        }
    };
    (@emit $to:tt execute) => {
        fn execute<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            op: &'life1 $crate::op::Op,
            blobs: &'life2 ::std::sync::Arc<dyn $crate::source::BlobSource>,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, 'life2: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).execute(op, blobs)
        }
    };
    (@emit $to:tt execute_batch) => {
        fn execute_batch<'life0, 'life1, 'async_trait>(
            &'life0 self,
            batch: $crate::backend::Batch,
            blobs: &'life1 ::std::sync::Arc<dyn $crate::source::BlobSource>,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).execute_batch(batch, blobs)
        }
    };
    (@emit $to:tt prepare_target) => {
        fn prepare_target<'life0, 'async_trait>(
            &'life0 self,
            create: bool,
        ) -> $crate::delegate_backend!(@fut 'async_trait, $crate::backend::TargetState)
        where 'life0: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).prepare_target(create)
        }
    };
    (@emit $to:tt read_dir) => {
        fn read_dir<'life0, 'life1, 'async_trait>(
            &'life0 self,
            dir: &'life1 $crate::path::RelPath,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::std::vec::Vec<$crate::backend::DirEntry>)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).read_dir(dir)
        }
    };
    (@emit $to:tt load_state) => {
        fn load_state<'life0, 'async_trait>(
            &'life0 self,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::core::option::Option<::std::vec::Vec<u8>>)
        where 'life0: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).load_state()
        }
    };
    (@emit $to:tt store_state) => {
        fn store_state<'life0, 'life1, 'async_trait>(
            &'life0 self,
            bytes: &'life1 [u8],
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).store_state(bytes)
        }
    };
    (@emit $to:tt lock) => {
        fn lock<'life0, 'life1, 'async_trait>(
            &'life0 self,
            holder: &'life1 $crate::lock::Holder,
        ) -> $crate::delegate_backend!(@fut 'async_trait, $crate::backend::LockGuard)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).lock(holder)
        }
    };
    (@emit $to:tt unlock) => {
        fn unlock<'life0, 'async_trait>(
            &'life0 self,
            guard: $crate::backend::LockGuard,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).unlock(guard)
        }
    };
    (@emit $to:tt scan) => {
        fn scan<'life0, 'async_trait>(
            &'life0 self,
            jobs: usize,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::std::vec::Vec<$crate::backend::Found>)
        where 'life0: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).scan(jobs)
        }
    };
    (@emit $to:tt scan_dirs) => {
        fn scan_dirs<'life0, 'life1, 'async_trait>(
            &'life0 self,
            dirs: &'life1 [$crate::path::RelPath],
            jobs: usize,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::std::vec::Vec<$crate::backend::Found>)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).scan_dirs(dirs, jobs)
        }
    };
    (@emit $to:tt probe) => {
        fn probe<'life0, 'life1, 'async_trait>(
            &'life0 self,
            dir: &'life1 $crate::path::RelPath,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).probe(dir)
        }
    };
    (@emit $to:tt read_file) => {
        fn read_file<'life0, 'life1, 'async_trait>(
            &'life0 self,
            path: &'life1 $crate::path::RelPath,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::std::vec::Vec<u8>)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).read_file(path)
        }
    };
    (@emit $to:tt load_aux) => {
        fn load_aux<'life0, 'life1, 'async_trait>(
            &'life0 self,
            name: &'life1 str,
        ) -> $crate::delegate_backend!(@fut 'async_trait, ::core::option::Option<::std::vec::Vec<u8>>)
        where 'life0: 'async_trait, 'life1: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).load_aux(name)
        }
    };
    (@emit $to:tt store_aux) => {
        fn store_aux<'life0, 'life1, 'life2, 'async_trait>(
            &'life0 self,
            name: &'life1 str,
            bytes: &'life2 [u8],
        ) -> $crate::delegate_backend!(@fut 'async_trait, ())
        where 'life0: 'async_trait, 'life1: 'async_trait, 'life2: 'async_trait, Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).store_aux(name, bytes)
        }
    };
    (@fut $l:lifetime, $out:ty) => {
        ::core::pin::Pin<::std::boxed::Box<
            dyn ::core::future::Future<Output = ::core::result::Result<$out, $crate::backend::Error>>
                + ::core::marker::Send + $l,
        >>
    };
}

#[async_trait]
impl<B: Backend + ?Sized> Backend for Box<B> {
    crate::delegate_backend!(*);
}

#[async_trait]
impl<B: Backend + ?Sized> Backend for Arc<B> {
    crate::delegate_backend!(*);
}
