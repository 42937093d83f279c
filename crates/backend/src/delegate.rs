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
        // Every method of the trait, with its arguments and output; `async` ones are boxed by
        // `#[async_trait]`, with a lifetime for each borrowed argument.
        $crate::delegate_backend!(@each $to [$($($skip)+)?]
            {sync capabilities() -> $crate::backend::Capabilities}
            {sync policy() -> $crate::backend::Policy}
            {async execute ['life1 'life2](
                op: &'life1 $crate::op::Op,
                blobs: &'life2 ::std::sync::Arc<dyn $crate::source::BlobSource>
            ) -> ()}
            {async execute_batch ['life1](
                batch: $crate::backend::Batch,
                blobs: &'life1 ::std::sync::Arc<dyn $crate::source::BlobSource>
            ) -> ()}
            {async prepare_target [](create: bool) -> $crate::backend::TargetState}
            {async read_dir ['life1](dir: &'life1 $crate::path::RelPath) -> ::std::vec::Vec<$crate::backend::DirEntry>}
            {async load_state []() -> ::core::option::Option<::std::vec::Vec<u8>>}
            {async store_state ['life1](bytes: &'life1 [u8]) -> ()}
            {async lock ['life1](holder: &'life1 $crate::lock::Holder) -> $crate::backend::LockGuard}
            {async unlock [](guard: $crate::backend::LockGuard) -> ()}
            {async scan [](jobs: usize) -> ::std::vec::Vec<$crate::backend::Found>}
            {async scan_dirs ['life1](dirs: &'life1 [$crate::path::RelPath], jobs: usize)
                -> ::std::vec::Vec<$crate::backend::Found>}
            {sync cost() -> ::std::vec::Vec<(&'static str, u64)>}
            {async probe ['life1](dir: &'life1 $crate::path::RelPath) -> ()}
            {async read_file ['life1](path: &'life1 $crate::path::RelPath) -> ::std::vec::Vec<u8>}
            {async load_aux ['life1](name: &'life1 str) -> ::core::option::Option<::std::vec::Vec<u8>>}
            {async store_aux ['life1 'life2](name: &'life1 str, bytes: &'life2 [u8]) -> ()}
            {async append_aux ['life1 'life2](name: &'life1 str, bytes: &'life2 [u8]) -> ()}
            {async aux_mtime ['life1](name: &'life1 str) -> ::core::option::Option<(i64, u32)>}
            {sync take_written() -> ::std::vec::Vec<$crate::backend::Written>}
            {sync record_written(on: bool)}
        );
    };
    (@each $to:tt $skips:tt $({$kind:ident $m:ident $($sig:tt)*})*) => {
        $( $crate::delegate_backend!(@maybe $to $m $skips {$kind $m $($sig)*}); )*
    };
    // `$m` is in the list: the wrapper implements it.
    (@maybe $to:tt capabilities [capabilities $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt policy [policy $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt execute [execute $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt execute_batch [execute_batch $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt prepare_target [prepare_target $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt read_dir [read_dir $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt load_state [load_state $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt store_state [store_state $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt lock [lock $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt unlock [unlock $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt scan [scan $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt scan_dirs [scan_dirs $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt cost [cost $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt probe [probe $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt read_file [read_file $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt load_aux [load_aux $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt store_aux [store_aux $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt append_aux [append_aux $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt aux_mtime [aux_mtime $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt take_written [take_written $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt record_written [record_written $($rest:ident)*] $sig:tt) => {};
    (@maybe $to:tt $m:ident [$first:ident $($rest:ident)*] $sig:tt) => {
        $crate::delegate_backend!(@maybe $to $m [$($rest)*] $sig);
    };
    (@maybe $to:tt $m:ident [] {$kind:ident $($sig:tt)*}) => {
        $crate::delegate_backend!(@$kind $to $($sig)*);
    };
    (@t $s:tt *) => { (**$s) };
    (@t $s:tt $field:tt) => { $s.$field };
    (@sync $to:tt $m:ident($($arg:ident: $ty:ty),*) $(-> $out:ty)?) => {
        fn $m(&self $(, $arg: $ty)*) $(-> $out)? {
            $crate::delegate_backend!(@t self $to).$m($($arg),*)
        }
    };
    // The signature `#[async_trait]` gives the trait's method: a lifetime for `self` and one for
    // each borrowed argument (`$l`), all outliving the boxed future; the future of the target is
    // returned as it is (no second box).
    (@async $to:tt $m:ident [$($l:lifetime)*]($($arg:ident: $ty:ty),*) -> $out:ty) => {
        fn $m<'life0, $($l,)* 'async_trait>(
            &'life0 self,
            $($arg: $ty),*
        ) -> $crate::delegate_backend!(@fut 'async_trait, $out)
        where 'life0: 'async_trait, $($l: 'async_trait,)* Self: 'async_trait
        {
            $crate::delegate_backend!(@t self $to).$m($($arg),*)
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
