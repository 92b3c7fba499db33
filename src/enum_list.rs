//! `enum_list!`: an enum of unit variants together with the array of all its variants, in
//! declaration order, so tables indexed by variant (`variant as usize`) are sized and filled
//! from the one list instead of a hand-kept count beside it.

/// `enum_list! { /// docs  pub enum Name { A, B, C } }` defines the enum and `Name::ALL`, every
/// variant in order (so `Name::ALL.len()` is the count and `Name::ALL[v as usize] == v`).
macro_rules! enum_list {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every variant, in declaration order.
            #[allow(dead_code)]
            pub const ALL: [$name; [$($name::$variant),+].len()] = [$($name::$variant),+];
        }
    };
}

pub(crate) use enum_list;
